"""Tolerance helpers for the Tokamax ops' checked-mode references (`check_reference=` in each
family's `op.py`).

Each op's `Reference(fn, scale=, grad_scale=)` multiplies the table in
`tpu_kernels.testing` by a scale; the scales follow the measured errors of
tests/tokamax: a K-long dot product errs like `dot(K, dtype, sizes...)` (its
inputs' root-mean-square sizes), and a weight's gradient sums over every row
that uses it (`rows`).
"""

from __future__ import annotations

import math

import torch

from tpu_kernels.testing import dot_scale

# Parameters that choose how, never what: no reference takes them.
IGNORE = ("implementation",)


def rms(t: torch.Tensor | None) -> float:
    """Root mean square of `t` (1.0 for None, empty or non-floating tensors)."""
    if t is None or t.numel() == 0 or not t.is_floating_point():
        return 1.0
    return t.detach().double().square().mean().sqrt().item()


def rows(x: torch.Tensor, dim: int = -1) -> int:
    """The number of rows of `x` when `dim` is the row (at least 1)."""
    return max(1, x.numel() // max(x.shape[dim], 1)) if x.ndim else 1


def dot(k: int, dtype: torch.dtype, *sizes: float) -> float:
    """The error scale of a K-long dot product in `dtype` of inputs of the given sizes."""
    return dot_scale(max(k, 1), dtype) * max(1.0, math.prod(sizes))


__all__ = ["IGNORE", "dot", "rms", "rows"]
