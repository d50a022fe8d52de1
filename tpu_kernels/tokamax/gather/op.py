"""MoE dispatch and combine: torch.ops.tokamax.ragged_gather and torch.ops.tokamax.ragged_gather_reduce
(Tokamax's `ops.ragged_gather`, `ops.ragged_gather_reduce`). On TPU the default is Tokamax's
SparseCore kernel (TPU v7 and later) with "xla" as fallback; elsewhere "xla". Neither kernel
has a VJP: the backward differentiates XLA (`no_vjp`).
"""

from __future__ import annotations

import jax
import torch
from tokamax import ops

from tpu_kernels.tokamax.gather import examples
from tpu_kernels.tokamax.implementation import (
    CPU,
    CUDA,
    EVERYWHERE,
    SRC,
    TPU,
    TPU_ONLY,
    XLA_ELSEWHERE,
    OpImplementations,
    resolve_implementation,
    tokamax_implementation,
)
from tpu_kernels.tokamax.wrap import tokamax_op

IMPLEMENTATIONS = (
    OpImplementations(
        "ragged_gather",
        {"xla": EVERYWHERE, "mosaic": TPU_ONLY},
        {CPU: "xla", CUDA: "xla", TPU: "mosaic,xla"},
        SRC + "ragged_gather.api",
    ),
    OpImplementations(
        "ragged_gather_reduce",
        {"xla": EVERYWHERE, "mosaic_tpu": TPU_ONLY},
        XLA_ELSEWHERE,
        SRC + "ragged_gather_reduce.api",
    ),
)


@tokamax_op("tokamax::ragged_gather", examples=examples.ragged_gather, no_vjp=("mosaic",))
def _ragged_gather(
    x: jax.Array,  # [in_size, hidden]
    indices: jax.Array,  # int32 [out_size]
    start: jax.Array,  # int32 [1]
    end: jax.Array,  # int32 [1]
    *,
    implementation: str | None = None,
) -> jax.Array:
    return ops.ragged_gather(x, indices, start, end, implementation=tokamax_implementation(implementation))


def ragged_gather(
    x: torch.Tensor,
    indices: torch.Tensor,
    start: torch.Tensor,
    end: torch.Tensor,
    *,
    implementation: str | None = None,
) -> torch.Tensor:
    """x[indices] (Tokamax's `ops.ragged_gather`): x [in_size, hidden], indices int [out_size].

    start and end (int [1]) bound the rows the TPU kernel fills; the "xla"
    implementation gathers every row. Gradient: with respect to x.
    """
    as_i32 = [t.to(torch.int32) for t in (indices, start, end)]
    return _ragged_gather(
        x, *as_i32, implementation=resolve_implementation("ragged_gather", x.device, implementation)
    )


def _gather_reduce_outputs(x, indices, topk_weights, valid_rows_mask, *, reduce_group_size, **kwargs):
    return x.new_empty((indices.shape[0] // reduce_group_size, x.shape[1]))


@tokamax_op(
    "tokamax::ragged_gather_reduce",
    examples=examples.ragged_gather_reduce,
    no_vjp=("mosaic_tpu",),
    symbolic_fake=_gather_reduce_outputs,
)
def _ragged_gather_reduce(
    x: jax.Array,  # [num_rows, hidden]
    indices: jax.Array,  # int32 [routes]
    topk_weights: jax.Array,  # [routes]
    valid_rows_mask: jax.Array,  # bool [routes]
    *,
    reduce_group_size: int,
    implementation: str | None = None,
) -> jax.Array:
    return ops.ragged_gather_reduce(
        x,
        indices,
        topk_weights,
        valid_rows_mask,
        reduce_group_size,
        implementation=tokamax_implementation(implementation),
    )


def ragged_gather_reduce(
    x: torch.Tensor,
    indices: torch.Tensor,
    topk_weights: torch.Tensor,
    valid_rows_mask: torch.Tensor,
    reduce_group_size: int,
    *,
    implementation: str | None = None,
) -> torch.Tensor:
    """The MoE combine (Tokamax's `ops.ragged_gather_reduce`).

    out[t] = sum over routes r in [t*G, (t+1)*G) with valid_rows_mask[r] of
    topk_weights[r] * x[indices[r]], accumulated in float32; G = reduce_group_size.

    Args:
      x: [num_rows, hidden] expert outputs.
      indices: int [routes]; topk_weights: [routes]; valid_rows_mask: bool [routes].
      reduce_group_size: routes per token (the MoE top-k); divides routes.

    Returns:
      [routes // G, hidden] in x's dtype. Gradients: x and topk_weights.
    """
    if indices.shape[0] % reduce_group_size:
        raise ValueError(
            f"tokamax.ragged_gather_reduce: routes ({indices.shape[0]}) must be a multiple of "
            f"reduce_group_size ({reduce_group_size})."
        )
    return _ragged_gather_reduce(
        x,
        indices.to(torch.int32),
        topk_weights,
        valid_rows_mask.bool(),
        reduce_group_size=reduce_group_size,
        implementation=resolve_implementation("ragged_gather_reduce", x.device, implementation),
    )


ragged_gather_op = _ragged_gather
ragged_gather_reduce_op = _ragged_gather_reduce

__all__ = [
    "IMPLEMENTATIONS",
    "ragged_gather",
    "ragged_gather_op",
    "ragged_gather_reduce",
    "ragged_gather_reduce_op",
]
