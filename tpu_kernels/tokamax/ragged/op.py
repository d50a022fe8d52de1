"""Grouped matmul: torch.ops.tokamax.ragged_dot and torch.ops.tokamax.ragged_dot_general.

ragged_dot(lhs [M, K], rhs [G, K, N], group_sizes [G]) -> [M, N]: the rows of
lhs are split into G consecutive groups of group_sizes[g] rows, and group g is
multiplied by rhs[g] (the expert matmul of a mixture-of-experts layer). Rows at
or beyond sum(group_sizes) are zero in the output; a sum above M is clipped.
group_sizes gets no gradient.

ragged_dot_general follows `jax.lax.ragged_dot_general`, with its dimension
numbers as lists of ints: the ragged dimension of lhs may be a non-contracting
dimension (rhs then has a group dimension: ragged_dot is this case), a
contracting dimension (the output gets a leading group dimension: the weight
gradient of ragged_dot), or a batch dimension.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import tokamax
import torch

from tpu_kernels.tokamax import implementation as impl
from tpu_kernels.tokamax.placements import rule, shape
from tpu_kernels.tokamax.ragged import reference
from tpu_kernels.tokamax.wrap import call_op, public_op
from tpu_kernels.verification.tolerance import Reference, rms

# ragged_dot_general resolves with ragged_dot's table: Tokamax runs both through one registry.
IMPLEMENTATIONS = (
    impl.table(
        "ragged_dot",
        {**impl.MOSAIC_BOTH, "mosaic_tpu_v2": impl.TPU_ONLY, "triton": impl.GPU_ONLY},
        cuda="mosaic,triton,xla",
        tpu="mosaic,xla",
    ),
)


def _out_dtype(lhs: torch.Tensor, rhs: torch.Tensor, preferred: torch.dtype | None) -> torch.dtype:
    return preferred if preferred is not None else torch.promote_types(lhs.dtype, rhs.dtype)


def _ragged_dot_outputs(lhs, rhs, group_sizes, *, preferred_element_type=None, **kwargs) -> torch.Tensor:
    dtype = _out_dtype(lhs, rhs, preferred_element_type)
    return lhs.new_empty((lhs.shape[0], rhs.shape[-1]), dtype=dtype)


# Takes ragged_dot_general's parameters by name, as its reference does (alike on purpose: a
# shape rule and an oracle each read the dimension numbers they need).
def _general_outputs(
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
    **kwargs,
) -> torch.Tensor:
    """jax.lax.ragged_dot_general's shape rule: [G if ragged contracting] + batch + lhs free + rhs free."""
    lhs_free = [d for d in range(lhs.ndim) if d not in lhs_contracting_dims and d not in lhs_batch_dims]
    rhs_used = set(rhs_contracting_dims) | set(rhs_batch_dims) | set(rhs_group_dims)
    rhs_free = [d for d in range(rhs.ndim) if d not in rhs_used]
    groups = [group_sizes.shape[-1]] if any(d in lhs_contracting_dims for d in lhs_ragged_dims) else []
    shape = (
        groups
        + [lhs.shape[d] for d in lhs_batch_dims]
        + [lhs.shape[d] for d in lhs_free]
        + [rhs.shape[d] for d in rhs_free]
    )
    return lhs.new_empty(shape, dtype=_out_dtype(lhs, rhs, preferred_element_type))


# Each output sums K products of lhs and rhs; the gradients sum over the rows (rhs's) and N.
_REFERENCE_OPTIONS = dict(
    reduces=lambda lhs: lhs.shape[-1],
    grad_reduces=lambda lhs: max(lhs.shape),
    scale=lambda lhs, rhs: 4 * max(1.0, rms(lhs) * rms(rhs)),
)


@rule(
    "rhs sharded on N (columns) with lhs Replicate; lhs and rhs both sharded on K (the "
    "contraction) gives a Partial output; the rows of lhs are not shardable (the groups are "
    "global row ranges)"
)
def _ragged_dot_sharding(a):
    from torch.distributed.tensor import Partial, Shard

    return [
        ([Shard(1)], {"rhs": Shard(2)}),
        ([Partial()], {"lhs": Shard(1), "rhs": Shard(1)}),
    ]


def _check_group_sizes(op: str, group_sizes: torch.Tensor, groups: int) -> torch.Tensor:
    if group_sizes.dtype.is_floating_point or group_sizes.is_complex() or group_sizes.dtype == torch.bool:
        raise TypeError(f"tokamax.{op}: group_sizes must be an integer tensor, got {group_sizes.dtype}.")
    if group_sizes.shape != (groups,):
        raise ValueError(
            f"tokamax.{op}: group_sizes must have shape ({groups},) (one size per group), "
            f"got {tuple(group_sizes.shape)}."
        )
    return group_sizes.to(torch.int32)


def ragged_dot(
    lhs: torch.Tensor,  # [M, K]
    rhs: torch.Tensor,  # [G, K, N]
    group_sizes: torch.Tensor,  # int32 [G]
    *,
    precision: str | None = None,
    preferred_element_type: torch.dtype | None = None,
    implementation: str | None = None,
) -> torch.Tensor:
    """Grouped matmul (Tokamax's `ragged_dot`, `jax.lax.ragged_dot`'s API).

    Args:
      lhs: [M, K]; its rows form G consecutive groups.
      rhs: [G, K, N]; group g's rows are multiplied by rhs[g].
      group_sizes: int [G], the rows per group (cast to int32; no gradient).
      precision: dot precision ("default", "high", "highest").
      preferred_element_type: output dtype (default: promote lhs, rhs).
      implementation: "xla", "mosaic" (TPU, CUDA), "triton" (CUDA); None chooses by device.

    Returns:
      [M, N]; rows at or beyond sum(group_sizes) are zero.
    """
    if lhs.ndim != 2 or rhs.ndim != 3 or lhs.shape[1] != rhs.shape[1]:
        raise ValueError(
            f"tokamax.ragged_dot: needs lhs [M, K] and rhs [G, K, N]; got {tuple(lhs.shape)} and "
            f"{tuple(rhs.shape)}."
        )
    group_sizes = _check_group_sizes("ragged_dot", group_sizes, rhs.shape[0])
    return call_op(ragged_dot_op, locals())


ragged_dot_op = public_op(
    ragged_dot,
    symbolic_fake=_ragged_dot_outputs,
    sharding=_ragged_dot_sharding,
    autocast="lower_precision_fp",  # a matmul: cast like aten.mm
    check_reference=Reference(reference.ragged_dot, **_REFERENCE_OPTIONS),
)


def ragged_dot_general(
    lhs: torch.Tensor,
    rhs: torch.Tensor,
    group_sizes: torch.Tensor,
    *,
    lhs_contracting_dims: Sequence[int],
    rhs_contracting_dims: Sequence[int],
    lhs_ragged_dims: Sequence[int],
    rhs_group_dims: Sequence[int] = (),
    lhs_batch_dims: Sequence[int] = (),
    rhs_batch_dims: Sequence[int] = (),
    precision: str | None = None,
    preferred_element_type: torch.dtype | None = None,
    implementation: str | None = None,
) -> torch.Tensor:
    """Ragged matmul with `jax.lax.ragged_dot_general`'s dimension numbers.

    `ragged_dot(lhs, rhs, gs)` is `ragged_dot_general(lhs, rhs, gs,
    lhs_contracting_dims=[1], rhs_contracting_dims=[1], lhs_ragged_dims=[0],
    rhs_group_dims=[0])`; with lhs_ragged_dims=[0] and lhs_contracting_dims=[0]
    (no group dim) it gives out[g] = lhs[rows_g].T @ rhs[rows_g], [G, K, N].
    """
    group_sizes = _check_group_sizes("ragged_dot_general", group_sizes, group_sizes.shape[-1])
    arguments = dict(locals())
    for name in _DIMENSIONS:  # any sequence of ints -> the list an int[] argument takes
        arguments[name] = list(arguments[name])
    return call_op(ragged_dot_general_op, arguments)


_DIMENSIONS = (
    "lhs_contracting_dims",
    "rhs_contracting_dims",
    "lhs_batch_dims",
    "rhs_batch_dims",
    "lhs_ragged_dims",
    "rhs_group_dims",
)


@rule(
    "an rhs free dim, or an lhs free dim that is not ragged, sharded alone; a contracting "
    "dim pair that is not ragged sharded on both gives a Partial output; batch dims are not "
    "sharded"
)
def _general_sharding(a):
    """jax.lax.ragged_dot_general's output is [G if the ragged dim is contracted] + batch +
    lhs free + rhs free; free dims are independent, and the product is linear in a contracted
    dim that is not the ragged one. Batch dims may be ragged or carry per-batch group sizes:
    left Replicate."""
    from torch.distributed.tensor import Partial, Shard

    lhs, rhs = shape(a["lhs"]), shape(a["rhs"])
    lc, rc = list(a["lhs_contracting_dims"]), list(a["rhs_contracting_dims"])
    lr = list(a["lhs_ragged_dims"])
    lb, rb = list(a.get("lhs_batch_dims", ())), list(a.get("rhs_batch_dims", ()))
    rg = list(a.get("rhs_group_dims", ()))
    lhs_free = [d for d in range(len(lhs)) if d not in lc and d not in lb]
    rhs_free = [d for d in range(len(rhs)) if d not in rc and d not in rb and d not in rg]
    first = int(any(d in lc for d in lr)) + len(lb)  # the output's first lhs free dim
    found = [([Shard(first + i)], {"lhs": Shard(d)}) for i, d in enumerate(lhs_free) if d not in lr]
    first += len(lhs_free)
    found += [([Shard(first + i)], {"rhs": Shard(d)}) for i, d in enumerate(rhs_free)]
    found += [([Partial()], {"lhs": Shard(dl), "rhs": Shard(dr)}) for dl, dr in zip(lc, rc) if dl not in lr]
    return found


def _ragged_dot_general(lhs, rhs, group_sizes, **kwargs):
    lc, rc, lb, rb, lr, rg = (tuple(kwargs.pop(name)) for name in _DIMENSIONS)
    dims = jax.lax.RaggedDotDimensionNumbers(
        dot_dimension_numbers=((lc, rc), (lb, rb)), lhs_ragged_dimensions=lr, rhs_group_dimensions=rg
    )
    return tokamax.ragged_dot_general(lhs, rhs, group_sizes, dims, **kwargs)


ragged_dot_general_op = public_op(
    ragged_dot_general,
    calls=_ragged_dot_general,
    table="ragged_dot",  # Tokamax runs both through one registry
    symbolic_fake=_general_outputs,
    sharding=_general_sharding,
    autocast="lower_precision_fp",
    check_reference=Reference(reference.ragged_dot_general, **_REFERENCE_OPTIONS),
)
