"""Plain-torch references of ragged_gather and ragged_gather_reduce (indexing, and a weighted
sum of routed rows), for tests (in float64) and benchmarks (as baselines).
Their parameters are named as op.py's (see `tokamax/registry.py`)."""

from __future__ import annotations

import torch


def ragged_gather(x, indices, start, end) -> torch.Tensor:
    return x[indices.long()]


def ragged_gather_reduce(x, indices, topk_weights, valid_rows_mask, reduce_group_size) -> torch.Tensor:
    """out[t] = sum of topk_weights[r] * x[indices[r]] over the valid routes r of token t."""
    routed = x[indices.long()] * (topk_weights * valid_rows_mask.to(topk_weights.dtype))[:, None]
    return routed.reshape(-1, reduce_group_size, x.shape[1]).sum(1)


__all__ = ["ragged_gather", "ragged_gather_reduce"]
