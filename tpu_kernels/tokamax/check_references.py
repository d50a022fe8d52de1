"""Checked mode's references for the Tokamax ops: each family's `reference.py` torch functions, with tolerances.

`register()` (called once by `tpu_kernels/tokamax/__init__.py`) sets each op's
`check_reference`, which `tpu_kernels.checked()` compares every call with in
float64. The tolerance scales multiply the table in `tpu_kernels.testing` (see
`checking.Reference`); they follow the measured errors of tests/tokamax: a
K-long dot product errs like `dot_scale(K)` times its inputs' sizes, and a
weight's gradient sums over every row that uses it.
"""

from __future__ import annotations

import importlib
import math
import pkgutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from tpu_kernels.checking import Reference
from tpu_kernels.testing import dot_scale

# Every family's reference functions under one name (they are distinct across families);
# imported here rather than read from FAMILIES, which fills only as the families load.
_HERE = Path(__file__).parent
R = SimpleNamespace(
    **{
        name: value
        for family in sorted(m.name for m in pkgutil.iter_modules([str(_HERE)]) if m.ispkg)
        if (_HERE / family / "reference.py").exists()
        for name, value in vars(importlib.import_module(f"tpu_kernels.tokamax.{family}.reference")).items()
        if callable(value) and not name.startswith("_")
    }
)


def _rms(t: torch.Tensor | None) -> float:
    if t is None or t.numel() == 0 or not t.is_floating_point():
        return 1.0
    return t.detach().double().square().mean().sqrt().item()


def _rows(x: torch.Tensor, dim: int = -1) -> int:
    return max(1, x.numel() // max(x.shape[dim], 1)) if x.ndim else 1


def _dot(k: int, dtype: torch.dtype, *sizes: float) -> float:
    return dot_scale(max(k, 1), dtype) * max(1.0, math.prod(sizes))


def _norm_grad(a: dict[str, Any]) -> float:
    return 4 + 2 * _rows(a["x"], a["dim"])  # weight and bias gradients sum over the rows


def _glu(a: dict[str, Any]) -> float:
    x, w = a["x"], a["weight"]
    return 4 * _dot(x.shape[-1], x.dtype, _rms(x), _rms(w))


def _glu_grad(a: dict[str, Any]) -> float:
    x = a["x"]
    return 4 * _dot(max(_rows(x), a["weight"].shape[-1]), x.dtype, _rms(x), _rms(a["weight"]))


def _attention(a: dict[str, Any]) -> float:
    q = a["query"]
    return 4 * _dot(max(q.shape[-1], a["key"].shape[-3]), q.dtype, _rms(a["value"]))


def _ragged(a: dict[str, Any]) -> float:
    lhs = a["lhs"]
    return 4 * _dot(lhs.shape[-1], lhs.dtype, _rms(lhs), _rms(a["rhs"]))


def _ragged_grad(a: dict[str, Any]) -> float:
    lhs = a["lhs"]
    return 4 * _dot(max(lhs.shape), lhs.dtype, _rms(lhs), _rms(a["rhs"]))


def _loss(a: dict[str, Any]) -> float:
    x = a["x"]
    per_row = _dot(x.shape[-1], x.dtype, _rms(x), _rms(a["weight"]))
    return 4 * per_row * (_rows(x) if a["reduction"] == "sum" else 1)


def _ragged_dot_general(
    lhs: torch.Tensor,
    rhs: torch.Tensor,
    group_sizes: torch.Tensor,
    *,
    lhs_contracting_dims: list[int],
    rhs_contracting_dims: list[int],
    lhs_ragged_dims: list[int],
    rhs_group_dims: list[int] = (),
    lhs_batch_dims: list[int] = (),
    rhs_batch_dims: list[int] = (),
    preferred_element_type: torch.dtype | None = None,
) -> torch.Tensor:
    """The two forms reference.py has; others raise NotImplementedError (checked mode
    then leaves the call unchecked, with a warning)."""
    dims = (
        list(lhs_contracting_dims),
        list(rhs_contracting_dims),
        list(lhs_ragged_dims),
        list(rhs_group_dims),
    )
    if lhs_batch_dims or rhs_batch_dims:
        raise NotImplementedError("batch dimensions")
    if dims == ([1], [1], [0], [0]):
        return R.ragged_dot(lhs, rhs, group_sizes, preferred_element_type=preferred_element_type)
    if dims == ([0], [0], [0], []):
        out = R.ragged_dot_contracting(lhs, rhs, group_sizes)
        return out if preferred_element_type is None else out.to(preferred_element_type)
    raise NotImplementedError(f"dimension numbers {dims}")


def _mhc_fused_post_pre(x, residual, post_layer_mix, comb_res_mix, fn, hc_scale, hc_base, **constants):
    # Tokamax rounds the new residual to x's dtype before the pre step; the reference sees
    # float64 inputs only, so that rounding is inside the tolerance (scale) instead.
    new_residual = R.mhc_post(x, residual, post_layer_mix, comb_res_mix)
    return (new_residual, *R.mhc_pre(new_residual, fn, hc_scale, hc_base, **constants))


_IGNORE = ("implementation",)

REFERENCES: dict[str, Reference] = {
    "layer_norm": Reference(R.layer_norm, scale=4, grad_scale=_norm_grad, ignore=_IGNORE),
    "gated_linear_unit": Reference(R.gated_linear_unit, scale=_glu, grad_scale=_glu_grad, ignore=_IGNORE),
    "dot_product_attention": Reference(
        R.dot_product_attention, scale=_attention, grad_scale=lambda a: 4 * _attention(a), ignore=_IGNORE
    ),
    "ragged_dot": Reference(R.ragged_dot, scale=_ragged, grad_scale=_ragged_grad, ignore=_IGNORE),
    "ragged_dot_general": Reference(
        _ragged_dot_general, scale=_ragged, grad_scale=_ragged_grad, ignore=_IGNORE
    ),
    "linear_softmax_cross_entropy_loss": Reference(
        R.linear_softmax_cross_entropy_loss,
        scale=_loss,
        grad_scale=lambda a: 2 * _rows(a["x"]),
        ignore=_IGNORE,
    ),
    "triangle_multiplication": Reference(R.triangle_multiplication, scale=20, grad_scale=40, ignore=_IGNORE),
    "top_k": Reference(R.top_k, ignore=_IGNORE),
    "router_topk": Reference(R.router_topk, ignore=_IGNORE),
    "ragged_gather": Reference(
        R.ragged_gather, grad_scale=lambda a: 4 * max(1, a["indices"].numel()), ignore=_IGNORE
    ),
    "ragged_gather_reduce": Reference(R.ragged_gather_reduce, scale=4, grad_scale=8, ignore=_IGNORE),
    "deepseek_rope": Reference(R.deepseek_rope, scale=4, grad_scale=4, ignore=_IGNORE),
    "mhc_pre": Reference(R.mhc_pre, scale=4, grad_scale=40, ignore=_IGNORE),
    "mhc_post": Reference(R.mhc_post, scale=4, grad_scale=16, ignore=_IGNORE),
    "mhc_fused_post_pre": Reference(_mhc_fused_post_pre, scale=4, grad_scale=40, ignore=_IGNORE),
    "kimi_delta_attention": Reference(R.kimi_delta_attention, scale=4, grad_scale=8, ignore=_IGNORE),
}


def register() -> None:
    """Give every Tokamax op its checked-mode reference."""
    from tpu_kernels.op import registered_ops

    ops = registered_ops()
    for name, ref in REFERENCES.items():
        ops[f"tokamax::{name}"].check_reference = ref


__all__ = ["REFERENCES", "register"]
