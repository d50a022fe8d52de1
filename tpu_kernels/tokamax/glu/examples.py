"""Representative TPU calls of gated_linear_unit, for `tpu-kernels check`, and small CPU calls
(`<op>_small`) for the sharding simulation (see `_examples.py`)."""

from __future__ import annotations

from tpu_kernels.tokamax._examples import BF16, Calls, S, on_tpu, randn


def gated_linear_unit() -> Calls:
    x, w = S((512, 1024), BF16), S((1024, 2, 2048), BF16)
    return [((x, w), dict(activation="silu", implementation=on_tpu("gated_linear_unit")))]


def gated_linear_unit_small() -> Calls:
    rn = randn()
    x = rn(2, 7, 16)
    return [
        ((x, rn(16, 2, 9, scale=0.25)), dict(activation="silu")),
        ((x, rn(16, 9, scale=0.25), rn(16, 9, scale=0.25)), dict(activation="gelu")),
    ]
