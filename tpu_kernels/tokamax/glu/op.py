"""Gated linear unit: torch.ops.tokamax.gated_linear_unit (SwiGLU, GEGLU, ReGLU, GLU).

    out = activation(x @ w_gate) * (x @ w_up)

Weights are Tokamax's: one fused [K, 2, N] tensor (`weight[:, 0]` is the gate,
`weight[:, 1]` the up projection), or the pair `weight=w_gate [K, N]`,
`weight_up=w_up [K, N]`: the [in, out] layout. `weight_layout="out_in"` takes the
pair as `nn.Linear` stores it, [N, K] each (`gate_proj.weight`, `up_proj.weight`):
the op transposes them inside its JAX function, where XLA folds the transpose into
the matmul's dimension numbers, so no transposed copy is made (tests/tokamax/
test_weight_layout.py counts the bytes). Passing `linear.weight.T` instead costs a
contiguous copy of each weight per call on CPU and CUDA (the bridge needs
contiguous memory).

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
from tpu_kernels.verification.tolerance import Reference, rms, rows

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


WEIGHT_LAYOUTS = ("in_out", "out_in")  # Tokamax's [K, N] (or fused [K, 2, N]); nn.Linear's [N, K]


def _check(x: torch.Tensor, weight: torch.Tensor, weight_up: torch.Tensor | None, weight_layout: str) -> None:
    if weight_layout not in WEIGHT_LAYOUTS:
        raise ValueError(
            f"tokamax.gated_linear_unit: weight_layout={weight_layout!r}; use 'in_out' (Tokamax's "
            "[K, N]) or 'out_in' (nn.Linear's [N, K])."
        )
    k = x.shape[-1] if x.ndim else None
    fused = weight_up is None
    if fused and weight_layout == "out_in":
        raise ValueError(
            "tokamax.gated_linear_unit: weight_layout='out_in' takes the pair weight=w_gate [N, K], "
            "weight_up=w_up [N, K] (nn.Linear's gate_proj.weight, up_proj.weight); a fused weight "
            "is [K, 2, N] with weight_layout='in_out'."
        )
    contracted = 1 if weight_layout == "out_in" else 0
    ok = (
        x.ndim >= 2
        and (weight.ndim == 3 and weight.shape[:2] == (k, 2) if fused else weight.ndim == 2)
        and (fused or (weight.shape[contracted] == k and weight_up.shape == weight.shape))
    )
    if not ok:
        pair = f"[N, K={k}]" if weight_layout == "out_in" else f"[K={k}, N]"
        want = f"weight [K={k}, 2, N]" if fused else f"weight and weight_up {pair}"
        got = tuple(weight.shape) if fused else (tuple(weight.shape), tuple(weight_up.shape))
        raise ValueError(
            f"tokamax.gated_linear_unit: x is {tuple(x.shape)} ([*batch, M, K]), so it needs {want}; got {got}."
        )


def gated_linear_unit(
    x: torch.Tensor,  # [*batch, M, K]
    weight: torch.Tensor,  # [K, 2, N] fused, or w_gate [K, N] ([N, K] "out_in") with weight_up
    weight_up: torch.Tensor | None = None,  # [K, N], or [N, K] with weight_layout="out_in"
    *,
    activation: str | None = None,
    weight_layout: str = "in_out",
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
      weight_layout: "in_out" (Tokamax's [K, N]), or "out_in": weight and
        weight_up as nn.Linear stores them, [N, K], used without a copy.
      precision: dot precision ("default", "high", "highest").
      implementation: "xla", or on CUDA "mosaic"/"triton"; None chooses by device.

    Returns:
      [*batch, M, N] in x's dtype.
    """
    _check(x, weight, weight_up, weight_layout)
    activation_fn(activation)
    return call_op(gated_linear_unit_op, locals())


def _gated_linear_unit(x, weight, weight_up, *, activation, weight_layout="in_out", **kwargs):
    if weight_layout == "out_in":  # a transpose XLA folds into the dot: no copy of the weights
        weight, weight_up = weight.T, weight_up.T
    weights = weight if weight_up is None else (weight, weight_up)
    return tokamax.gated_linear_unit(x, weights, activation=activation_fn(activation), **kwargs)


def _glu_outputs(x, weight, weight_up=None, *, weight_layout="in_out", **kwargs) -> torch.Tensor:
    n = weight.shape[0] if weight_layout == "out_in" else weight.shape[-1]
    return x.new_empty((*x.shape[:-1], n))


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
    if a.get("weight_layout", "in_out") == "out_in":  # [N, K] each
        columns = ([Shard(ndim - 1)], {"weight": Shard(0), "weight_up": Shard(0)})
    else:
        w_cols = len(shape(a["weight"])) - 1  # [K, 2, N] fused or [K, N]
        columns = ([Shard(ndim - 1)], {"weight": Shard(w_cols), "weight_up": Shard(1)})
    return [*tokens, columns]


def _terms(x, weight):
    return 4 * max(1.0, rms(x) * rms(weight))


def _grad_terms(x, weight, weight_layout="in_out"):
    """The weights' gradient sums over the rows; the input's over the N outputs."""
    n = weight.shape[0] if weight_layout == "out_in" else weight.shape[-1]
    return max(rows(x), n)


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
        grad_reduces=_grad_terms,
        scale=_terms,
    ),
)
