"""MoE routing: torch.ops.tokamax.top_k and torch.ops.tokamax.router_topk (Tokamax's `ops.top_k`,
`ops.router_topk`). Selections: no gradient. On TPU the default is Tokamax's Pallas kernel
with "xla" as fallback (top_k's runs on the SparseCore of TPU v7 and later); elsewhere "xla".
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import torch
from tokamax import ops

from tpu_kernels.tokamax import implementation as impl
from tpu_kernels.tokamax.placements import ByName
from tpu_kernels.tokamax.topk import reference
from tpu_kernels.tokamax.wrap import call_op, public_op
from tpu_kernels.verification.tolerance import Reference

_KERNEL = {"mosaic_tpu": impl.TPU_ONLY}
IMPLEMENTATIONS = (
    impl.table("top_k", _KERNEL, tpu="mosaic_tpu,xla", api="topk"),
    impl.table("router_topk", _KERNEL, tpu="mosaic_tpu,xla"),
)


def _rows(a):
    """Each row is ranked alone; a row's entries compete with each other (not shardable)."""
    from torch.distributed.tensor import Shard

    return [([Shard(0), Shard(0)], {"scores": Shard(0), "row_lengths": Shard(0)})]


_ROWS = "rows: scores (and row_lengths) sharded on dim 0; both outputs sharded on rows"


# Shape rules for symbolic sizes (Tokamax's checks compare sizes with Python ints, which
# symbolic sizes cannot answer); tests/tokamax/test_fakes.py checks them against the
# fakes jax.eval_shape derives.
def _top_k_outputs(scores, row_lengths=None, *, k, **kwargs):
    shape = (scores.shape[0], k)
    return scores.new_empty(shape, dtype=torch.int32), scores.new_empty(shape, dtype=torch.float32)


def top_k(
    scores: torch.Tensor,
    k: int,
    row_lengths: torch.Tensor | None = None,
    *,
    implementation: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact top-k per row (Tokamax's `ops.top_k`).

    Args:
      scores: float32 [b, n].
      k: entries per row.
      row_lengths: int [b]; only the first row_lengths[i] columns of row i compete.

    Returns:
      (indices int32 [b, k], values float32 [b, k]), best first; where a row has
      fewer than k eligible entries the index is -1 and the value -inf. (torch.topk
      returns (values, indices).)
    """
    if scores.ndim != 2 or scores.dtype != torch.float32:
        raise ValueError(
            f"tokamax.top_k: scores must be float32 [b, n], got {scores.dtype} {tuple(scores.shape)}."
        )
    row_lengths = None if row_lengths is None else row_lengths.to(torch.int32)
    return call_op(top_k_op, locals())


def _top_k(scores, row_lengths, *, k, implementation):
    indices, bits = ops.top_k(scores, k, row_lengths, return_scores=True, implementation=implementation)
    return indices, jax.lax.bitcast_convert_type(bits, jnp.float32)


top_k_op = public_op(
    top_k,
    calls=_top_k,
    backward=None,
    symbolic_fake=_top_k_outputs,
    sharding=ByName(_rows, _ROWS),
    check_reference=Reference(reference.top_k),
)


def _router_topk_outputs(scores, *, k, **kwargs):
    shape = (scores.shape[0], k)
    return scores.new_empty(shape, dtype=torch.float32), scores.new_empty(shape, dtype=torch.int32)


def router_topk(
    scores: torch.Tensor, k: int, *, implementation: str | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The top k experts of each token without a sort (Tokamax's `ops.router_topk`).

    Args:
      scores: [tokens, experts], float32, bfloat16 or float16.

    Returns:
      (weights float32 [tokens, k], descending; indices int32 [tokens, k]). Ties
      go to the lowest expert id. The weights are the selected scores (no
      softmax) and carry no gradient: for a differentiable gate use
      `scores.gather(1, indices.long())`.
    """
    return call_op(router_topk_op, locals())


router_topk_op = public_op(
    router_topk,
    backward=None,
    symbolic_fake=_router_topk_outputs,
    sharding=ByName(_rows, _ROWS),
    check_reference=Reference(reference.router_topk),
)
