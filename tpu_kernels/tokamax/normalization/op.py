"""Normalisation: torch.ops.tokamax.layer_norm (LayerNorm, and RMSNorm with subtract_mean=False).

Tokamax normalises over one axis (`dim`), computes in float32 or wider and
casts back to x's dtype. `layer_norm(x, w, b, eps=e)` equals
`F.layer_norm(x, (C,), w, b, e)` and `rms_norm(x, w, eps=e)` equals
`F.rms_norm(x, (C,), w, e)` for dim=-1. The default eps is Tokamax's 1e-6
(F.layer_norm's is 1e-5; F.rms_norm's is the dtype's machine epsilon).
"""

from __future__ import annotations

import tokamax
import torch

from tpu_kernels.tokamax import implementation as impl
from tpu_kernels.tokamax.normalization import reference
from tpu_kernels.tokamax.placements import rule, shape
from tpu_kernels.tokamax.wrap import call_op, public_op
from tpu_kernels.verification.tolerance import Reference, rows

IMPLEMENTATIONS = (
    impl.table("layer_norm", {"triton": impl.GPU_ONLY}, cuda="triton,xla", api="normalization"),
)


def _check(x: torch.Tensor, dim: int, who: str, **params: torch.Tensor | None) -> None:
    """`who`: the public function called (rms_norm forwards to layer_norm), named by the error."""
    if not -x.ndim <= dim < x.ndim:
        raise ValueError(f"tokamax.{who}: dim={dim} is out of range for x of shape {tuple(x.shape)}.")
    for name, p in params.items():
        if p is not None and tuple(p.shape) != (x.shape[dim],):
            raise ValueError(
                f"tokamax.{who}: {name} must have shape (x.shape[{dim}],) = ({x.shape[dim]},), "
                f"got {tuple(p.shape)}."
            )


def layer_norm(
    x: torch.Tensor,  # any shape
    weight: torch.Tensor | None = None,  # [x.shape[dim]]
    bias: torch.Tensor | None = None,  # [x.shape[dim]]
    *,
    dim: int = -1,
    eps: float = 1e-6,
    scale_offset: float = 0.0,
    subtract_mean: bool = True,
    implementation: str | None = None,
) -> torch.Tensor:
    """LayerNorm over `dim` (Tokamax's `layer_norm`).

    y = (x - mean) / sqrt(var + eps) * (weight + scale_offset) + bias, with the
    statistics over `dim`; subtract_mean=False gives RMSNorm.

    Args:
      x: any shape, normalised over `dim`.
      weight, bias: [x.shape[dim]] or None (Tokamax's scale and offset).
      scale_offset: added to weight (e.g. 1.0 for weights stored as w - 1).
      implementation: "xla" or "triton" (CUDA); None chooses by device.

    Returns:
      x's shape and dtype.
    """
    return call_op(layer_norm_op, locals(), _check_layer_norm)


def _check_layer_norm(values: tuple) -> None:
    """layer_norm's argument check, on layer_norm_op's values (x, weight, bias, dim, ...)."""
    x, weight, bias, dim = values[:4]
    _check(x, dim, "layer_norm", weight=weight, bias=bias)


def _check_rms_norm(values: tuple) -> None:
    """rms_norm's: the same op, its bias always None."""
    x, weight, _, dim = values[:4]
    _check(x, dim, "rms_norm", weight=weight)


def _layer_norm(x, weight, bias, *, dim, eps, **kwargs):
    return tokamax.layer_norm(x, weight, bias, axis=dim, epsilon=eps, **kwargs)


@rule("x sharded on any dim but `dim` (rows), weight and bias Replicate")
def _sharding(a):
    """Rows are normalised independently; the weight and bias gradients sum over the rows
    (Partial, derived)."""
    from torch.distributed.tensor import Shard

    ndim = len(shape(a["x"]))
    normalised = a.get("dim", -1) % ndim
    return [([Shard(d)], {"x": Shard(d)}) for d in range(ndim) if d != normalised]


def _weight_sums(x, dim=-1):
    n = rows(x, dim)  # the weight and bias gradients sum over the rows
    return {"weight": n, "bias": n}


# autocast "fp32": statistics in float32, as torch's autocast runs layer_norm.
layer_norm_op = public_op(
    layer_norm,
    calls=_layer_norm,
    sharding=_sharding,
    autocast="fp32",
    check_reference=Reference(reference.layer_norm, scale=4, grad_reduces=_weight_sums),
)


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    *,
    dim: int = -1,
    eps: float = 1e-6,
    scale_offset: float = 0.0,
    implementation: str | None = None,
) -> torch.Tensor:
    """RMSNorm over `dim`: x / sqrt(mean(x^2) + eps) * (weight + scale_offset).

    Tokamax's `layer_norm(..., subtract_mean=False)`, the same op
    (torch.ops.tokamax.layer_norm); x's shape and dtype.
    """
    arguments = {
        "x": x,
        "weight": weight,
        "bias": None,
        "dim": dim,
        "eps": eps,
        "scale_offset": scale_offset,
        "subtract_mean": False,
        "implementation": implementation,
    }
    return call_op(layer_norm_op, arguments, _check_rms_norm)
