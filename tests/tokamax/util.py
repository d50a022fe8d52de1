"""Forward and gradient checks of a Tokamax op against a float64 torch reference."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from tests.helpers import assert_close
from tpu_kernels import checked

# (op, case, dtype, what) -> max abs error; printed by conftest's summary with -v.
MEASURED: dict[tuple[str, str, str, str], float] = {}


def _floating(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.is_floating_point()


def _per(value: float | Sequence[float], n: int) -> list[float]:
    return [value] * n if isinstance(value, (int, float)) else list(value)


def check_against_reference(
    op: str,
    case: str,
    fn: Callable[..., Any],
    ref: Callable[..., Any],
    inputs: Sequence[Any],
    dtype: torch.dtype,
    *,
    out_scale: float | Sequence[float] = 1.0,
    grad_scale: float | Sequence[float] = 1.0,
    tol_dtype: torch.dtype | None = None,
    grads: bool = True,
) -> None:
    """fn(*inputs) against ref(*inputs in float64): each output, then the gradient of
    sum(out * g) (g random, one per floating output) with respect to every floating input.
    fn runs in strict checked mode (`tpu_kernels.checked(strict=True)`), forward and
    backward, so each case also holds the op's checked-mode declaration to account: its
    reference, its tolerance (reductions and scales) and its eps spot check.

    inputs: tensors already in their dtypes (ints and bools as they are) and other values.
    out_scale / grad_scale: the typical magnitude of each output / each gradient, which
    scales the absolute tolerance (assert_close's `scale`).
    tol_dtype: the tolerance row to use when it is not `dtype`'s (an op that computes
    part of the result in a narrower type).
    """
    tol_dtype = tol_dtype or dtype
    name = str(dtype).removeprefix("torch.")
    live = [t.detach().requires_grad_(grads) if _floating(t) else t for t in inputs]
    wide = [t.detach().double().requires_grad_(grads) if _floating(t) else t for t in inputs]
    with checked(strict=True):
        outs = fn(*live)
    expected = ref(*wide)
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    expected = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    for i, (o, e, s) in enumerate(zip(outs, expected, _per(out_scale, len(outs)))):
        assert o.shape == e.shape, (i, o.shape, e.shape)
        MEASURED[(op, case, name, f"out{i}")] = _err(o, e)
        assert_close(o, e, tol_dtype, scale=s, what=f"{op} {case} output {i}")
    if not grads:
        return
    pairs = [(o, e) for o, e in zip(outs, expected) if o.is_floating_point()]
    gs = [torch.randn(o.shape, dtype=torch.float64).to(o.dtype) for o, _ in pairs]  # fresh, never zeros
    diff = [t for t in live if _floating(t)]
    diff64 = [t for t in wide if _floating(t)]
    with checked(strict=True):
        got = torch.autograd.grad(sum((o * g).sum() for (o, _), g in zip(pairs, gs)), diff)
    want = torch.autograd.grad(sum((e * g.double()).sum() for (_, e), g in zip(pairs, gs)), diff64)
    for i, (a, b, s) in enumerate(zip(got, want, _per(grad_scale, len(got)))):
        assert a.dtype == diff[i].dtype and a.shape == diff[i].shape
        MEASURED[(op, case, name, f"grad{i}")] = _err(a, b)
        assert_close(a, b, tol_dtype, scale=s, what=f"{op} {case} grad of input {i}")


def _err(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.detach().double() - b.detach().double()).abs().max().item() if a.numel() else 0.0
