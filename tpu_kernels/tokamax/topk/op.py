"""MoE routing: torch.ops.tokamax.top_k and torch.ops.tokamax.router_topk (Tokamax's `ops.top_k`,
`ops.router_topk`). Selections: no gradient. On TPU the default is Tokamax's Pallas kernel
with "xla" as fallback (top_k's runs on the SparseCore of TPU v7 and later); elsewhere "xla".
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import torch
from tokamax import ops

from tpu_kernels.tokamax.implementation import (
    EVERYWHERE,
    SRC,
    TPU_ONLY,
    XLA_ELSEWHERE,
    OpImplementations,
    resolve_implementation,
    tokamax_implementation,
)
from tpu_kernels.tokamax.topk import examples
from tpu_kernels.tokamax.wrap import tokamax_op

IMPLEMENTATIONS = (
    OpImplementations("top_k", {"xla": EVERYWHERE, "mosaic_tpu": TPU_ONLY}, XLA_ELSEWHERE, SRC + "topk.api"),
    OpImplementations(
        "router_topk", {"xla": EVERYWHERE, "mosaic_tpu": TPU_ONLY}, XLA_ELSEWHERE, SRC + "router_topk.api"
    ),
)


# Shape rules for symbolic sizes (Tokamax's checks compare sizes with Python ints, which
# symbolic sizes cannot answer); tests/tokamax/test_fakes.py checks them against the
# fakes jax.eval_shape derives.
def _top_k_outputs(scores, row_lengths=None, *, k, **kwargs):
    shape = (scores.shape[0], k)
    return scores.new_empty(shape, dtype=torch.int32), scores.new_empty(shape, dtype=torch.float32)


@tokamax_op("tokamax::top_k", examples=examples.top_k, backward=None, symbolic_fake=_top_k_outputs)
def _top_k(
    scores: jax.Array,  # float32 [b, n]
    row_lengths: jax.Array | None = None,  # int32 [b]
    *,
    k: int,
    implementation: str | None = None,
) -> tuple[jax.Array, jax.Array]:
    indices, bits = ops.top_k(
        scores, k, row_lengths, return_scores=True, implementation=tokamax_implementation(implementation)
    )
    return indices, jax.lax.bitcast_convert_type(bits, jnp.float32)


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
    lengths = None if row_lengths is None else row_lengths.to(torch.int32)
    return _top_k(
        scores, lengths, k=k, implementation=resolve_implementation("top_k", scores.device, implementation)
    )


def _router_topk_outputs(scores, *, k, **kwargs):
    shape = (scores.shape[0], k)
    return scores.new_empty(shape, dtype=torch.float32), scores.new_empty(shape, dtype=torch.int32)


@tokamax_op(
    "tokamax::router_topk", examples=examples.router_topk, backward=None, symbolic_fake=_router_topk_outputs
)
def _router_topk(
    scores: jax.Array, *, k: int, implementation: str | None = None
) -> tuple[jax.Array, jax.Array]:
    out = ops.router_topk(scores, k, implementation=tokamax_implementation(implementation))
    return tuple(out)


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
    return _router_topk(
        scores, k=k, implementation=resolve_implementation("router_topk", scores.device, implementation)
    )


top_k_op = _top_k
router_topk_op = _router_topk

__all__ = ["IMPLEMENTATIONS", "router_topk", "router_topk_op", "top_k", "top_k_op"]
