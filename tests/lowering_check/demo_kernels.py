"""Kernels with known TPU problems, for the tests of `tpu-kernels check` (op namespace check_demo)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from tpu_kernels import tpu_kernel
from tpu_kernels.kernels.matmul.pallas import _kernel as _matmul_kernel


def _spec(*shape: int, dtype: str = "float32") -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, dtype)


def _double(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2


def blocked(body, x, grid, out_spec: pl.BlockSpec, *, in_spec=None, aliases=None) -> jax.Array:
    """`body` over one input x on `grid`, into an output like x: the blocks of x are
    `in_spec` (default: the output's). The one-in, one-out pallas_call of the demos here
    and of the coverage tests, which differ only in the grid and the blocks."""
    return pl.pallas_call(
        body,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=grid,
        in_specs=[in_spec or out_spec],
        out_specs=out_spec,
        input_output_aliases=aliases or {},
    )(x)


@tpu_kernel("check_demo::misaligned", examples=lambda: [((_spec(63, 125),), {})])
def misaligned(x: torch.Tensor) -> torch.Tensor:
    """Blocks of (3, 5): neither a multiple of (8, 128) nor the whole array."""
    return blocked(_double, x, (21, 25), pl.BlockSpec((3, 5), lambda i, j: (i, j)))


def _sort(x_ref, o_ref):
    o_ref[...] = jnp.sort(x_ref[...], axis=-1)


@tpu_kernel("check_demo::sorts", examples=lambda: [((_spec(8, 128),), {})])
def sorts(x: torch.Tensor) -> torch.Tensor:
    """jnp.sort inside a kernel: no TPU lowering."""
    return pl.pallas_call(_sort, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


@tpu_kernel("check_demo::huge_blocks", examples=lambda: [((_spec(8192, 8192),), {})])
def huge_blocks(x: torch.Tensor) -> torch.Tensor:
    """One 256 MiB block in and one out; a one-step grid single-buffers them: 512 MiB, more VMEM
    than any chip has."""
    return blocked(_double, x, (1,), pl.BlockSpec((8192, 8192), lambda i: (i, 0)))


@tpu_kernel("check_demo::no_examples")
def no_examples(x: torch.Tensor) -> torch.Tensor:
    return x * 2


# The shipped matmul's kernel body (its k axis carries the accumulator) under dimension
# semantics of the demo's choosing: the race is in racy_matmul's "parallel" k axis, not in
# the body. Should the shipped body stop accumulating over k, racy_matmul would stop
# failing the check, and tests/lowering_check/test_check.py and test_semantics_and_limits.py say so.
def _matmul(a, b, semantics):
    (m, k), n = a.shape, b.shape[1]
    grid = (m // 128, n // 128, k // 128)
    return pl.pallas_call(
        functools.partial(_matmul_kernel, n_k=grid[2]),
        out_shape=jax.ShapeDtypeStruct((m, n), a.dtype),
        grid=grid,
        in_specs=[
            pl.BlockSpec((128, 128), lambda i, j, kk: (i, kk)),
            pl.BlockSpec((128, 128), lambda i, j, kk: (kk, j)),
        ],
        out_specs=pl.BlockSpec((128, 128), lambda i, j, kk: (i, j)),
        scratch_shapes=[pltpu.VMEM((128, 128), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=semantics),
    )(a, b)


def _matmul_examples():
    return [((_spec(128, 512), _spec(512, 128)), {})]


@tpu_kernel("check_demo::racy_matmul", examples=_matmul_examples)
def racy_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The k axis carries the accumulator but is marked "parallel": a race with two cores."""
    return _matmul(a, b, ("parallel", "parallel", "parallel"))


@tpu_kernel("check_demo::sound_matmul", examples=_matmul_examples, reference=lambda a, b: a @ b)
def sound_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The same kernel with the k axis "arbitrary"; its backward is derived from a reference."""
    return _matmul(a, b, ("parallel", "parallel", "arbitrary"))


@tpu_kernel(
    "check_demo::scaled",
    outputs=("y", "e"),
    residuals=("e",),
    examples=lambda: [((_spec(16, 256, dtype="bfloat16"),), {"scale": 3.0})],
)
def scaled(x: torch.Tensor, *, scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    e = pl.pallas_call(_double, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
    return e * scale, e


@scaled.def_backward
def scaled_backward(e: torch.Tensor, grad_y: torch.Tensor, *, scale: float) -> torch.Tensor:
    return grad_y * scale * 2


def _rows_of_8(x: torch.Tensor, rows: int) -> torch.Tensor:
    return blocked(_double, x, (rows,), pl.BlockSpec((8, x.shape[1]), lambda i: (i, 0)))


@tpu_kernel("check_demo::floor_grid", examples=lambda: [((_spec(12, 128),), {})])
def floor_grid(x: torch.Tensor) -> torch.Tensor:
    """grid=(12 // 8,): one step of 8 rows, rows 8-11 never written."""
    return _rows_of_8(x, x.shape[0] // 8)


@tpu_kernel("check_demo::cdiv_grid", examples=lambda: [((_spec(12, 128),), {})])
def cdiv_grid(x: torch.Tensor) -> torch.Tensor:
    """grid=(pl.cdiv(12, 8),): the second block is partial, which Pallas masks."""
    return _rows_of_8(x, pl.cdiv(x.shape[0], 8))


@tpu_kernel("check_demo::past_the_end", examples=lambda: [((_spec(12, 128),), {})])
def past_the_end(x: torch.Tensor) -> torch.Tensor:
    """Four steps of 8 rows on 12 rows: blocks 2 and 3 lie entirely past the array."""
    return _rows_of_8(x, 4)


# ---- packed dtypes: Mosaic's native tile is (8 * packing, 128) -------------------------------


def _copy(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def _rows(x, rows: int) -> jax.Array:
    block = pl.BlockSpec((rows, 128), lambda i: (i, 0))
    return pl.pallas_call(
        _copy,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(pl.cdiv(x.shape[0], rows),),
        in_specs=[block],
        out_specs=block,
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(x)


@tpu_kernel("check_demo::int8_rows_of_8", examples=lambda: [((_spec(64, 128, dtype="int8"),), {})])
def int8_rows_of_8(x: torch.Tensor) -> torch.Tensor:
    """int8 blocks of (8, 128): Mosaic accepts them, in (8, 128) tiles, not int8's native (32, 128)."""
    return _rows(x, 8)


@tpu_kernel("check_demo::bf16_rows_of_8", examples=lambda: [((_spec(64, 128, dtype="bfloat16"),), {})])
def bf16_rows_of_8(x: torch.Tensor) -> torch.Tensor:
    """bfloat16 blocks of (8, 128): (8, 128) tiles, not bfloat16's native (16, 128)."""
    return _rows(x, 8)


@tpu_kernel("check_demo::int8_rows_of_32", examples=lambda: [((_spec(64, 128, dtype="int8"),), {})])
def int8_rows_of_32(x: torch.Tensor) -> torch.Tensor:
    """int8 blocks of (32, 128): int8's native tile."""
    return _rows(x, 32)


# ---- scalar prefetch: block indices read from an index array at run time ---------------------

TABLE = (8, 8, 128)  # 8 slabs of (8, 128); a gather picks whole slabs


def _prefetch_gather(body, idx, table, in_spec: pl.BlockSpec, out_block: tuple) -> jax.Array:
    """One slab of `table` per grid step i into out[i], `idx` prefetched to SMEM for the
    index maps and the body."""
    n = idx.shape[0]
    spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1,
        grid=(n,),
        in_specs=[in_spec],
        out_specs=pl.BlockSpec(out_block, lambda i, idx: (i, 0, 0)),
    )
    return pl.pallas_call(
        body,
        out_shape=jax.ShapeDtypeStruct((n, *table.shape[1:]), table.dtype),
        grid_spec=spec,
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(idx, table)


def _gather(idx, table, shift: int) -> jax.Array:
    """out[i] = table[idx[i] + shift], the slab chosen by the index map."""

    def body(idx_ref, t_ref, o_ref):
        o_ref[...] = t_ref[...]

    block = (None, *table.shape[1:])
    in_spec = pl.BlockSpec(block, lambda i, idx: (idx[i] + shift, 0, 0))
    return _prefetch_gather(body, idx, table, in_spec, block)


def _gather_examples():
    # Concrete index values: the bounds check runs the kernel on them (a ShapeDtypeStruct
    # of int32 would run as zeros, in range whatever the kernel does with them).
    return [((np.array([0, 3, 7], np.int32), _spec(*TABLE)), {})]


@tpu_kernel("check_demo::gather", examples=_gather_examples)
def gather(idx: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """table[idx]: in range for indices in [0, 8)."""
    return _gather(idx, table, 0)


@tpu_kernel("check_demo::gather_next", examples=_gather_examples)
def gather_next(idx: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """An off-by-one index map (idx + 1): index 7 reads slab 8 of 8."""
    return _gather(idx, table, 1)


@tpu_kernel("check_demo::gather_previous", examples=_gather_examples)
def gather_previous(idx: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """An off-by-one index map (idx - 1): index 0 reads slab -1."""
    return _gather(idx, table, -1)


@tpu_kernel("check_demo::gather_dma", examples=_gather_examples)
def gather_dma(idx: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """The table stays in HBM and the body copies slab idx[i] + 1 itself (off by one): no index
    map sees the index, only the TPU interpreter's bounds check on the copy does."""

    def body(idx_ref, t_hbm, o_ref):
        pltpu.sync_copy(t_hbm.at[pl.ds(idx_ref[pl.program_id(0)] + 1, 1)], o_ref)

    in_spec = pl.BlockSpec(memory_space=pl.ANY)
    return _prefetch_gather(body, idx, table, in_spec, (1, *table.shape[1:]))


@tpu_kernel(
    "check_demo::gather_shape_only",
    examples=lambda: [((_spec(3, dtype="int32"), _spec(*TABLE)), {})],
)
def gather_shape_only(idx: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """`gather` with an example that gives the indices' shape only: they run as zeros."""
    return _gather(idx, table, 0)


@tpu_kernel("check_demo::gather_next_remat", examples=_gather_examples)
def gather_next_remat(idx: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """`gather_next` inside jax.checkpoint: the bounds check reaches the pallas_call there too."""
    return jax.checkpoint(lambda i, t: _gather(i, t, 1))(idx, table)
