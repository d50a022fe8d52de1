"""Representative TPU calls of gated_linear_unit, for `tpu-kernels check` (see `_examples.py`)."""

from __future__ import annotations

from tpu_kernels.tokamax._examples import BF16, Calls, S, on_tpu


def gated_linear_unit() -> Calls:
    x, w = S((512, 1024), BF16), S((1024, 2, 2048), BF16)
    return [((x, w), dict(activation="silu", implementation=on_tpu("gated_linear_unit")))]
