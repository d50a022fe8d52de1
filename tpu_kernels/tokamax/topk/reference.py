"""Plain-torch references of top_k and router_topk: a stable sort (ties to the lowest index,
as in Tokamax), for tests and benchmarks (as baselines)."""

from __future__ import annotations

import torch


def top_k(scores, k, row_lengths=None) -> tuple[torch.Tensor, torch.Tensor]:
    """torch.topk over each row's first row_lengths[i] columns -> (indices, values), -1/-inf padded."""
    n = scores.shape[1]
    masked = scores
    if row_lengths is not None:
        masked = scores.masked_fill(
            torch.arange(n, device=scores.device) >= row_lengths[:, None], float("-inf")
        )
    values, indices = _topk_lowest_index_first(masked, k)
    return indices.masked_fill(values == float("-inf"), -1).to(torch.int32), values


def router_topk(scores, k) -> tuple[torch.Tensor, torch.Tensor]:
    """The top k of the float32 scores, ties to the lowest index -> (weights, indices)."""
    values, indices = _topk_lowest_index_first(scores.float(), k)
    return values, indices.to(torch.int32)


def _topk_lowest_index_first(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    # torch.topk leaves the order of ties unspecified (they are common in bfloat16 scores);
    # a stable descending sort keeps equal values in index order, as Tokamax does.
    values, indices = torch.sort(scores, dim=1, descending=True, stable=True)
    return values[:, :k], indices[:, :k]


__all__ = ["router_topk", "top_k"]
