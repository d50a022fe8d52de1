"""Small Pallas TPU kernels written for the calibration corpus (`corpus.py`), not shipped.

Each one isolates what the VMEM check must model and the shipped kernels do not all show:
a one-step grid (the block is the whole array), VMEM scratch of a chosen size, scalar
prefetch (`pltpu.PrefetchScalarGridSpec` with an index table in SMEM), an explicit
`pltpu.CompilerParams(vmem_limit_bytes=...)`, and float32 temporaries that stay live in the
body. Torch-free: they run on a TPU host with JAX alone.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

_MIB = 2**20


def _params(vmem_limit_bytes: int | None) -> pltpu.CompilerParams:
    if vmem_limit_bytes is None:
        return pltpu.CompilerParams(dimension_semantics=("parallel",))
    return pltpu.CompilerParams(dimension_semantics=("parallel",), vmem_limit_bytes=vmem_limit_bytes)


def _row_blocks(
    kernel, xs: tuple, block_rows: int, vmem_limit_bytes: int | None = None, scratch: tuple = ()
) -> jax.Array:
    """`kernel` over row blocks of `block_rows` whole rows of each of `xs` (one shape), one output
    like them; block_rows == rows makes a one-step grid."""
    rows, cols = xs[0].shape
    spec = pl.BlockSpec((block_rows, cols), lambda i: (i, 0))
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(xs[0].shape, xs[0].dtype),
        grid=(pl.cdiv(rows, block_rows),),
        in_specs=[spec] * len(xs),
        out_specs=spec,
        scratch_shapes=list(scratch),
        compiler_params=_params(vmem_limit_bytes),
    )(*xs)


def _copy_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def copy(x: jax.Array, *, block_rows: int, vmem_limit_bytes: int | None = None) -> jax.Array:
    """out = x, `block_rows` whole rows a step (block_rows == rows: a one-step grid)."""
    return _row_blocks(_copy_kernel, (x,), block_rows, vmem_limit_bytes)


def _scratch_kernel(x_ref, o_ref, s_ref):
    # The scratch holds a float32 copy of the block, read back for the output: it is used,
    # so the compiler cannot drop it.
    s_ref[: x_ref.shape[0], :] = x_ref[...].astype(jnp.float32) * 2.0
    o_ref[...] = (s_ref[: x_ref.shape[0], :] + 1.0).astype(o_ref.dtype)


def with_scratch(
    x: jax.Array, *, block_rows: int, scratch_rows: int, vmem_limit_bytes: int | None = None
) -> jax.Array:
    """out = 2x + 1 through a float32 VMEM scratch of (scratch_rows, cols), scratch_rows >= block_rows."""
    scratch = (pltpu.VMEM((scratch_rows, x.shape[1]), jnp.float32),)
    return _row_blocks(_scratch_kernel, (x,), block_rows, vmem_limit_bytes, scratch)


def _gather_kernel(idx_ref, table_ref, o_ref):
    del idx_ref  # used by the index maps only
    o_ref[...] = table_ref[...].astype(jnp.float32).astype(o_ref.dtype) * 2


def gather_blocks(idx: jax.Array, table: jax.Array, *, block_rows: int) -> jax.Array:
    """out block i = 2 * table block idx[i] (row blocks of `block_rows`), idx prefetched to SMEM."""
    (n,), cols = idx.shape, table.shape[1]
    return pl.pallas_call(
        _gather_kernel,
        out_shape=jax.ShapeDtypeStruct((n * block_rows, cols), table.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=(n,),
            in_specs=[pl.BlockSpec((block_rows, cols), lambda i, idx: (idx[i], 0))],
            out_specs=pl.BlockSpec((block_rows, cols), lambda i, idx: (i, 0)),
        ),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
    )(idx, table)


def _paged_kernel(lens_ref, pages_ref, x_ref, o_ref, acc_ref):
    del pages_ref
    j = pl.program_id(1)

    @pl.when(j == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    @pl.when(j < lens_ref[pl.program_id(0)])
    def _add():
        acc_ref[...] += x_ref[...].astype(jnp.float32)

    @pl.when(j == pl.num_programs(1) - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def paged_sum(lens: jax.Array, pages: jax.Array, x: jax.Array, *, page_rows: int) -> jax.Array:
    """For each sequence s: the sum of its first lens[s] pages of x (rows of `page_rows`), the
    pages listed in pages[s, :]: two prefetched tables, a float32 scratch accumulator."""
    n_seq, n_pages = pages.shape
    cols = x.shape[1]
    return pl.pallas_call(
        _paged_kernel,
        out_shape=jax.ShapeDtypeStruct((n_seq * page_rows, cols), x.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=2,
            grid=(n_seq, n_pages),
            in_specs=[pl.BlockSpec((page_rows, cols), lambda s, j, lens, pages: (pages[s, j], 0))],
            out_specs=pl.BlockSpec((page_rows, cols), lambda s, j, lens, pages: (s, 0)),
            scratch_shapes=[pltpu.VMEM((page_rows, cols), jnp.float32)],
        ),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
    )(lens, pages, x)


def _live_kernel(x_ref, o_ref, *, live: int):
    # `live` float32 values of the block's shape, all needed by the final sum: the body holds
    # them at once (a product chain with distinct constants, so none is folded away).
    x = x_ref[...].astype(jnp.float32)
    values = [x * (1.0 + 0.125 * i) + i for i in range(live)]
    mixed = [jnp.sin(v) if i % 2 else jnp.exp(-v * v) for i, v in enumerate(values)]
    total = mixed[0]
    for v in mixed[1:]:
        total = total * 0.5 + v
    o_ref[...] = total.astype(o_ref.dtype)


def live_temporaries(
    x: jax.Array, *, block_rows: int, live: int, vmem_limit_bytes: int | None = None
) -> jax.Array:
    """An elementwise kernel whose body makes `live` float32 intermediates of the block's shape."""
    return _row_blocks(functools.partial(_live_kernel, live=live), (x,), block_rows, vmem_limit_bytes)


def _multi_kernel(*refs):
    *ins, o_ref = refs
    total = ins[0][...].astype(jnp.float32)
    for r in ins[1:]:
        total = total + r[...].astype(jnp.float32)
    o_ref[...] = total.astype(o_ref.dtype)


def add_n(*xs: jax.Array, block_rows: int) -> jax.Array:
    """The sum of n arrays of one shape: n + 1 double-buffered blocks a step."""
    return _row_blocks(_multi_kernel, xs, block_rows)


__all__ = ["add_n", "copy", "gather_blocks", "live_temporaries", "paged_sum", "with_scratch"]
