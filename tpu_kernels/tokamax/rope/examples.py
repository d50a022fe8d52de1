"""Representative TPU calls of deepseek_rope, for `tpu-kernels check` (see `_examples.py`)."""

from __future__ import annotations

from tpu_kernels.tokamax._examples import BF16, F32, I32, Calls, S, on_tpu


def deepseek_rope() -> Calls:
    inputs = (S((64, 4, 128), BF16), S((64,), I32), S((128, 64), F32))
    return [(inputs, dict(implementation=on_tpu("deepseek_rope")))]
