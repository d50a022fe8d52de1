"""Representative TPU calls of triangle_multiplication, for `tpu-kernels check` (see `_examples.py`)."""

from __future__ import annotations

from tpu_kernels.tokamax._examples import BOOL, F32, Calls, S, on_tpu


def triangle_multiplication() -> Calls:
    n, c, h, d = 128, 128, 128, 128
    inputs = (
        S((n, n, c), F32),
        S((n, n), BOOL),
        S((c, 2, h), F32),
        S((c, 2, h), F32),
        S((h, d), F32),
        S((c, d), F32),
        S((c,), F32),
        S((c,), F32),
        S((h,), F32),
        S((h,), F32),
    )
    return [(inputs, dict(triangle_type="outgoing", implementation=on_tpu("triangle_multiplication")))]
