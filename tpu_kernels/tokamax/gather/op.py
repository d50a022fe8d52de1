"""MoE dispatch and combine: torch.ops.tokamax.ragged_gather and torch.ops.tokamax.ragged_gather_reduce
(Tokamax's `ops.ragged_gather`, `ops.ragged_gather_reduce`). On TPU the default is Tokamax's
SparseCore kernel (TPU v7 and later) with "xla" as fallback; elsewhere "xla". Neither kernel
has a VJP: the backward differentiates XLA (`no_vjp`).
"""

from __future__ import annotations

import torch

from tpu_kernels.tokamax import implementation as impl
from tpu_kernels.tokamax.gather import reference
from tpu_kernels.tokamax.placements import mesh_size, rule, shape
from tpu_kernels.tokamax.wrap import call_op, public_op
from tpu_kernels.verification.tolerance import Reference

IMPLEMENTATIONS = (
    impl.table("ragged_gather", {"mosaic": impl.TPU_ONLY}, tpu="mosaic,xla", no_vjp=("mosaic",)),
    impl.table(
        "ragged_gather_reduce", {"mosaic_tpu": impl.TPU_ONLY}, tpu="mosaic_tpu,xla", no_vjp=("mosaic_tpu",)
    ),
)


def ragged_gather(
    x: torch.Tensor,  # [in_size, hidden]
    indices: torch.Tensor,  # int32 [out_size]
    start: torch.Tensor,  # int32 [1]
    end: torch.Tensor,  # int32 [1]
    *,
    implementation: str | None = None,
) -> torch.Tensor:
    """x[indices] (Tokamax's `ops.ragged_gather`): x [in_size, hidden], indices int [out_size].

    start and end (int [1]) bound the rows the TPU kernel fills; the "xla"
    implementation gathers every row. Gradient: with respect to x.
    """
    indices, start, end = (t.to(torch.int32) for t in (indices, start, end))
    return call_op(ragged_gather_op, locals())


@rule("hidden: x sharded on dim 1 (columns), indices, start and end Replicate")
def _gather_sharding(a):
    """A row gather moves whole rows: each column is gathered alone. The output rows are not
    sharded: start and end bound them in global row numbers (the TPU kernel's)."""
    from torch.distributed.tensor import Shard

    return [([Shard(1)], {"x": Shard(1)})]


ragged_gather_op = public_op(
    ragged_gather,
    sharding=_gather_sharding,
    check_reference=Reference(
        reference.ragged_gather,
        # x's gradient scatter-adds the rows that gathered each row, in x's dtype (XLA's
        # scatter-add: a bf16 x accumulates in bf16), so linear in the count for every dtype
        grad_scale=lambda indices: 4 * max(1, indices.numel()),
    ),
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
    indices, valid_rows_mask = indices.to(torch.int32), valid_rows_mask.bool()
    return call_op(ragged_gather_reduce_op, locals())


def _gather_reduce_outputs(x, indices, topk_weights, valid_rows_mask, *, reduce_group_size, **kwargs):
    return x.new_empty((indices.shape[0] // reduce_group_size, x.shape[1]))


@rule(
    "hidden: x sharded on dim 1 with the routes Replicate; or tokens: indices, topk_weights "
    "and valid_rows_mask sharded on routes with x Replicate, when the tokens split evenly "
    "over the mesh"
)
def _gather_reduce_sharding(a):
    """Columns are independent; so are tokens, each reducing its own reduce_group_size
    consecutive routes, as long as every rank's routes are whole tokens: DTensor's shards
    of routes and of tokens line up only when the tokens divide evenly (7 tokens of 2
    routes on 2 ranks: routes 7 + 7, tokens 4 + 3). x's gradient then sums over the ranks'
    routes (Partial, derived)."""
    from torch.distributed.tensor import Shard

    found = [([Shard(1)], {"x": Shard(1)})]
    tokens = shape(a["indices"])[0] // a["reduce_group_size"]
    if tokens % mesh_size(a) == 0:
        routes = {n: Shard(0) for n in ("indices", "topk_weights", "valid_rows_mask")}
        found.append(([Shard(0)], routes))
    return found


ragged_gather_reduce_op = public_op(
    ragged_gather_reduce,
    symbolic_fake=_gather_reduce_outputs,
    sharding=_gather_reduce_sharding,
    check_reference=Reference(
        reference.ragged_gather_reduce,
        reduces=lambda reduce_group_size: reduce_group_size,  # each token sums its routes
        # topk_weights' gradient is a dot over hidden; x's sums the routes that read a row
        grad_reduces=lambda x, indices: {"topk_weights": x.shape[1], "x": indices.shape[0]},
        scale=4,
        grad_scale=8,
        computes_in=torch.float32,  # Tokamax casts the weights to float32, float64 inputs too
    ),
)
