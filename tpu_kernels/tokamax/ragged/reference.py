"""Plain-torch references of ragged_dot and ragged_dot_general: grouped matmuls by loops
over the groups, for tests (in float64) and benchmarks (as baselines).
Their parameters are named as op.py's (see `tokamax/registry.py`)."""

from __future__ import annotations

import torch


def _group_bounds(group_sizes: torch.Tensor, m: int) -> list[tuple[int, int]]:
    ends = torch.cumsum(group_sizes.to(torch.int64), 0).clamp(max=m).tolist()
    starts = [0] + ends[:-1]
    return list(zip(starts, ends))


def ragged_dot(lhs, rhs, group_sizes, *, preferred_element_type=None) -> torch.Tensor:
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


def ragged_dot_general(
    lhs,
    rhs,
    group_sizes,
    *,
    lhs_contracting_dims,
    rhs_contracting_dims,
    lhs_ragged_dims,
    rhs_group_dims=(),
    lhs_batch_dims=(),
    rhs_batch_dims=(),
    preferred_element_type=None,
) -> torch.Tensor:
    """The two forms above (ragged_dot, and the ragged dimension contracted); others raise
    NotImplementedError (checked mode then leaves the call unchecked, with a warning)."""
    dims = (
        list(lhs_contracting_dims),
        list(rhs_contracting_dims),
        list(lhs_ragged_dims),
        list(rhs_group_dims),
    )
    if lhs_batch_dims or rhs_batch_dims:
        raise NotImplementedError("batch dimensions")
    if dims == ([1], [1], [0], [0]):
        return ragged_dot(lhs, rhs, group_sizes, preferred_element_type=preferred_element_type)
    if dims == ([0], [0], [0], []):
        out = ragged_dot_contracting(lhs, rhs, group_sizes)
        return out if preferred_element_type is None else out.to(preferred_element_type)
    raise NotImplementedError(f"dimension numbers {dims}")


__all__ = ["ragged_dot", "ragged_dot_contracting", "ragged_dot_general"]
