"""Forward and gradient checks of a Tokamax op against a float64 torch reference."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from tests.helpers import assert_close

# (op, case, dtype, what) -> max abs error; printed by conftest's summary with -v.
MEASURED: dict[tuple[str, str, str, str], float] = {}


def _floating(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.is_floating_point()


def check_against_reference(
    op: str,
    case: str,
    fn: Callable[..., torch.Tensor],
    ref: Callable[..., torch.Tensor],
    inputs: Sequence[Any],
    dtype: torch.dtype,
    *,
    out_scale: float = 1.0,
    grad_scale: float | Sequence[float] = 1.0,
    tol_dtype: torch.dtype | None = None,
    grads: bool = True,
) -> None:
    """fn(*inputs) against ref(*inputs in float64): the output, then the gradient of
    sum(out * g) for a random g with respect to every floating-point input.

    inputs: tensors already in `dtype` (ints and bools as they are) and other values.
    out_scale / grad_scale: the typical magnitude of the output / of each gradient,
    which scales the absolute tolerance (assert_close's `scale`).
    tol_dtype: the tolerance row to use when it is not `dtype`'s (an op that computes
    part of the result in a narrower type).
    """
    live = [t.detach().requires_grad_(grads) if _floating(t) else t for t in inputs]
    wide = [t.detach().double().requires_grad_(grads) if _floating(t) else t for t in inputs]
    out = fn(*live)
    expected = ref(*wide)
    assert out.shape == expected.shape, (out.shape, expected.shape)
    tol_dtype = tol_dtype or dtype
    MEASURED[(op, case, str(dtype).removeprefix("torch."), "out")] = _err(out, expected)
    assert_close(out, expected, tol_dtype, scale=out_scale, what=f"{op} {case} output")
    if not grads:
        return
    g = torch.randn(out.shape, dtype=torch.float64).to(out.dtype)  # fresh, never all zeros
    diff = [t for t in live if _floating(t)]
    diff64 = [t for t in wide if _floating(t)]
    got = torch.autograd.grad((out * g).sum(), diff)
    want = torch.autograd.grad((expected * g.double()).sum(), diff64)
    scales = [grad_scale] * len(got) if isinstance(grad_scale, (int, float)) else list(grad_scale)
    for i, (a, b, s) in enumerate(zip(got, want, scales)):
        assert a.dtype == diff[i].dtype and a.shape == diff[i].shape
        MEASURED[(op, case, str(dtype).removeprefix("torch."), f"grad{i}")] = _err(a, b)
        assert_close(a, b, tol_dtype, scale=s, what=f"{op} {case} grad of input {i}")


def _err(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.detach().double() - b.detach().double()).abs().max().item() if a.numel() else 0.0
