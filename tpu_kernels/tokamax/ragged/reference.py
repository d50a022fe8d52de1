"""Plain-torch references of ragged_dot and ragged_dot_general: grouped matmuls by loops
over the groups, for tests (in float64) and benchmarks (as baselines)."""

from __future__ import annotations

import torch


def _group_bounds(group_sizes: torch.Tensor, m: int) -> list[tuple[int, int]]:
    ends = torch.cumsum(group_sizes.to(torch.int64), 0).clamp(max=m).tolist()
    starts = [0] + ends[:-1]
    return list(zip(starts, ends))


def ragged_dot(
    lhs: torch.Tensor,
    rhs: torch.Tensor,
    group_sizes: torch.Tensor,
    *,
    preferred_element_type: torch.dtype | None = None,
) -> torch.Tensor:
    """Grouped matmul by a loop over groups; rows past sum(group_sizes) are zero."""
    out = lhs.new_zeros((lhs.shape[0], rhs.shape[-1]), dtype=torch.promote_types(lhs.dtype, rhs.dtype))
    for g, (start, end) in enumerate(_group_bounds(group_sizes, lhs.shape[0])):
        if end > start:
            out = out.index_add(0, torch.arange(start, end, device=lhs.device), lhs[start:end] @ rhs[g])
    return out if preferred_element_type is None else out.to(preferred_element_type)


def ragged_dot_contracting(lhs: torch.Tensor, rhs: torch.Tensor, group_sizes: torch.Tensor) -> torch.Tensor:
    """ragged_dot_general with the ragged dimension contracted: out[g] = lhs[rows_g].T @ rhs[rows_g]."""
    blocks = [lhs[s:e].T @ rhs[s:e] for s, e in _group_bounds(group_sizes, lhs.shape[0])]
    return torch.stack(blocks)


__all__ = ["ragged_dot", "ragged_dot_contracting"]
