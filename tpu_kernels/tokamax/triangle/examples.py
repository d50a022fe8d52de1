"""Representative TPU calls of triangle_multiplication, for `tpu-kernels check`, and small CPU calls
(`<op>_small`) for the sharding simulation (see `_examples.py`)."""

from __future__ import annotations

import torch

from tpu_kernels.tokamax._examples import BOOL, F32, Calls, S, on_tpu, randn


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


def triangle_multiplication_small() -> Calls:
    rn = randn()
    n, c, h, d = 5, 8, 4, 7
    inputs = (
        rn(n, n, c),
        torch.rand(n, n, generator=torch.Generator().manual_seed(1)) > 0.2,
        rn(c, 2, h, scale=0.3),
        rn(c, 2, h, scale=0.3),
        rn(h, d, scale=0.5),
        rn(c, d, scale=0.3),
        rn(c),
        rn(c),
        rn(h),
        rn(h),
    )
    return [(inputs, dict(triangle_type="outgoing"))]
