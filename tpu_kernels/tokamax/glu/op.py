"""Gated linear unit: torch.ops.tokamax.gated_linear_unit (SwiGLU, GEGLU, ReGLU, GLU).

    out = activation(x @ w_gate) * (x @ w_up)

Weights are Tokamax's: one fused [K, 2, N] tensor (`weight[:, 0]` is the gate,
`weight[:, 1]` the up projection), or the pair `weight=w_gate [K, N]`,
`weight_up=w_up [K, N]`. Note the [in, out] layout: an `nn.Linear` weight is
[out, in], so `w_gate = linear.weight.T`.

The activation is named by a string, since the op's arguments must be
serialisable; `ACTIVATIONS` lists the names. "gelu" is the exact (erf) GELU,
as in torch's F.gelu; "gelu_tanh" is F.gelu(approximate="tanh"), which is
what `jax.nn.gelu` computes by default. None is Tokamax's default, the
identity (a bilinear unit).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import tokamax
import torch

from tpu_kernels.tokamax import implementation as impl
from tpu_kernels.tokamax.glu import reference
from tpu_kernels.tokamax.placements import rule, shape
from tpu_kernels.tokamax.wrap import call_op, public_op
from tpu_kernels.tolerance import Reference, rms, rows

# "mosaic" here is the Mosaic GPU kernel only: on TPU this op runs XLA.
IMPLEMENTATIONS = (
    impl.table(
        "gated_linear_unit",
        {"mosaic": impl.GPU_ONLY, "triton": impl.GPU_ONLY, "cutedsl": impl.GPU_ONLY},
        cuda="mosaic,triton,xla",
    ),
)


def _gelu(x: jax.Array) -> jax.Array:
    return jax.nn.gelu(x, approximate=False)


def _gelu_tanh(x: jax.Array) -> jax.Array:
    return jax.nn.gelu(x, approximate=True)


# Activation name -> JAX function, with the torch function it matches.
ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "silu": jax.nn.silu,  # F.silu; SwiGLU
    "swish": jax.nn.silu,  # Tokamax/JAX's name for silu
    "gelu": _gelu,  # F.gelu (exact); GEGLU
    "gelu_tanh": _gelu_tanh,  # F.gelu(approximate="tanh")
    "relu": jax.nn.relu,  # ReGLU
    "sigmoid": jax.nn.sigmoid,  # the original GLU
    "tanh": jax.nn.tanh,
}


def activation_fn(activation: str | None) -> Callable[[jax.Array], jax.Array] | None:
    if activation is None:
        return None
    try:
        return ACTIVATIONS[activation]
    except KeyError:
        raise ValueError(
            f"tokamax.gated_linear_unit: activation={activation!r}; choose from "
            f"{', '.join(ACTIVATIONS)} or None (identity)."
        ) from None


def _check(x: torch.Tensor, weight: torch.Tensor, weight_up: torch.Tensor | None) -> None:
    k = x.shape[-1] if x.ndim else None
    fused = weight_up is None
    ok = (
        x.ndim >= 2
        and (weight.ndim == 3 and weight.shape[:2] == (k, 2) if fused else weight.ndim == 2)
        and (fused or (weight.shape[0] == k and weight_up.shape == weight.shape))
    )
    if not ok:
        want = f"weight [K={k}, 2, N]" if fused else f"weight and weight_up [K={k}, N]"
        got = tuple(weight.shape) if fused else (tuple(weight.shape), tuple(weight_up.shape))
        raise ValueError(
            f"tokamax.gated_linear_unit: x is {tuple(x.shape)} ([*batch, M, K]), so it needs {want}; got {got}."
        )


def gated_linear_unit(
    x: torch.Tensor,  # [*batch, M, K]
    weight: torch.Tensor,  # [K, 2, N] fused, or w_gate [K, N] with weight_up
    weight_up: torch.Tensor | None = None,  # [K, N]
    *,
    activation: str | None = None,
    precision: str | None = None,
    implementation: str | None = None,
) -> torch.Tensor:
    """activation(x @ w_gate) * (x @ w_up) (Tokamax's `gated_linear_unit`).

    Args:
      x: [*batch, M, K].
      weight: fused [K, 2, N] (gate = weight[:, 0], up = weight[:, 1]), or
        w_gate [K, N] when weight_up is given.
      weight_up: w_up [K, N], or None for fused weights.
      activation: "silu"/"swish" (SwiGLU), "gelu" (exact), "gelu_tanh",
        "relu", "sigmoid", "tanh", or None (identity, Tokamax's default).
      precision: dot precision ("default", "high", "highest").
      implementation: "xla", or on CUDA "mosaic"/"triton"; None chooses by device.

    Returns:
      [*batch, M, N] in x's dtype.
    """
    _check(x, weight, weight_up)
    activation_fn(activation)
    return call_op(gated_linear_unit_op, locals())


def _gated_linear_unit(x, weight, weight_up, *, activation, **kwargs):
    weights = weight if weight_up is None else (weight, weight_up)
    return tokamax.gated_linear_unit(x, weights, activation=activation_fn(activation), **kwargs)


def _glu_outputs(x, weight, weight_up=None, **kwargs) -> torch.Tensor:
    return x.new_empty((*x.shape[:-1], weight.shape[-1]))


@rule(
    "x sharded on a batch dim or M (tokens) with the weights Replicate; or the weights sharded "
    "on N (columns) with x Replicate"
)
def _sharding(a):
    """Tokens are independent, and so are output columns: out[..., n] needs column n of
    each weight. The contraction (K) goes through the activation: not Partial."""
    from torch.distributed.tensor import Shard

    ndim = len(shape(a["x"]))
    tokens = [([Shard(d)], {"x": Shard(d)}) for d in range(ndim - 1)]
    w_cols = len(shape(a["weight"])) - 1  # [K, 2, N] fused or [K, N]
    columns = ([Shard(ndim - 1)], {"weight": Shard(w_cols), "weight_up": Shard(1)})
    return [*tokens, columns]


def _terms(x, weight):
    return 4 * max(1.0, rms(x) * rms(weight))


# autocast "lower_precision_fp": two matmuls, cast like aten.mm.
gated_linear_unit_op = public_op(
    gated_linear_unit,
    calls=_gated_linear_unit,
    symbolic_fake=_glu_outputs,
    sharding=_sharding,
    autocast="lower_precision_fp",
    check_reference=Reference(
        reference.gated_linear_unit,
        reduces=lambda x: x.shape[-1],  # each projection sums hidden products
        grad_reduces=lambda x, weight: max(rows(x), weight.shape[-1]),  # the weights' sum over rows
        scale=_terms,
    ),
)
