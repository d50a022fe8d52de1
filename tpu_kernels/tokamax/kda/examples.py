"""Representative TPU calls of kimi_delta_attention, for `tpu-kernels check` (see `_examples.py`)."""

from __future__ import annotations

from tpu_kernels.tokamax._examples import BF16, Calls, S, on_tpu


def kimi_delta_attention() -> Calls:
    inputs = (*[S((2, 1, 256, 128), BF16)] * 4, S((2, 1, 256), BF16))
    return [(inputs, dict(implementation=on_tpu("kimi_delta_attention")))]
