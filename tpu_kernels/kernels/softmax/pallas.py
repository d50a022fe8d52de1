"""Row softmax over the last dimension as Pallas TPU kernels, with the backward's.

The input is viewed as (rows, cols). Where whole rows fit VMEM (the default block is 0.5-2 MiB
of x; `_blocks.auto_rows`), one grid step handles `block_rows` full rows, so the max and the sum
stay in one block. Arithmetic in float32 (float64 stays float64).

    forward:  y = exp(x - max(x)) / sum(exp(x - max(x)))
    backward: dx = y * (dy - sum(dy * y))

Rows wider than CHUNK columns (a vocabulary of 32k-256k logits) keep whole-row blocks, and
the body walks each block's columns a chunk at a time (`chunk_for`): a running max m and sum l
of exp(x - m), rescaled by exp(m_old - m_new) when the max grows (online softmax), then
exp(x - m) / l written chunk by chunk; the backward's row sum of dy * y likewise. The float32
temporaries are then a chunk's, so a block of one sublane tile of rows fits VMEM up to 262144
columns, and every row is read once and written once: on a v5e nearer the HBM peak than the
column-tiled kernels at [512, 131072] (bench/reports/chip_v5e_rows_probe.json).

Rows too wide even for that are column-tiled, with the same online statistics:

- `_staged` (where a tile of rows fits VMEM in the input's own dtype, up to about a million
  float32 columns): one kernel, grid (row tiles, 2 phases, column blocks). Phase 0 reads each
  column block once, keeps it in a VMEM copy of the rows and updates the statistics; phase 1
  writes the output from that copy. The inputs' block index stays put through phase 1, so
  nothing is read twice: HBM traffic is a whole-row block's.
- `_two_pass` (wider rows): a statistics kernel, then an output kernel that reads x again.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jax import export
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from tpu_kernels.kernels import _vmem
from tpu_kernels.kernels._blocks import (
    RowFootprint,
    auto_rows,
    cost,
    is_empty,
    require_float,
    row_params,
    rows_or_refuse,
    rows_tile,
)
from tpu_kernels.kernels._config import RowsConfig

# VMEM per row of a whole-row block (_blocks.RowFootprint): forward, the x and y blocks with
# x, exp(x - m) and the output live in float32; backward, the y, dy and dx blocks with y, dy,
# dy * y and dx in float32.
FORWARD = RowFootprint(blocks=2, temporaries=3)
BACKWARD = RowFootprint(blocks=3, temporaries=4)
# The column-tiled kernels' blocks, and per row their (rows, 1) float32 statistics.
WIDE_FORWARD = RowFootprint(blocks=2, temporaries=3, columns=2)
WIDE_BACKWARD = RowFootprint(blocks=3, temporaries=4, columns=1)


@dataclass(frozen=True)
class Config(RowsConfig):
    """softmax's blocks: block_rows (`_config.RowsConfig`)."""

    @classmethod
    def default(cls, shape, dtype, *, backward: bool = False) -> Config:
        """The rows per step a call leaving block_rows unset runs its forward (or `backward`)
        with (`_blocks.rows_or_refuse`, its footprint FORWARD or BACKWARD, the body walking the
        columns `chunk_for` gives). None where not even one tile of whole rows fits VMEM: the
        call then tiles the columns too (`_wide`), with blocks the op's parameters do not set."""
        cols = shape[-1]
        rows = math.prod(shape[:-1]) if cols else 0
        itemsize, chunk = jnp.dtype(dtype).itemsize, chunk_for(cols)
        footprint = BACKWARD if backward else FORWARD
        op = "softmax_backward" if backward else "softmax"
        if not any(export.is_symbolic_dim(n) for n in (rows, cols)) and auto_rows(rows, cols, itemsize, footprint, chunk) is None:
            return cls(None)
        return cls(rows_or_refuse(op, rows, cols, itemsize, None, footprint, chunk))


def _acc(dtype) -> jnp.dtype:
    return jnp.promote_types(dtype, jnp.float32)


def _fwd_kernel(x_ref, o_ref, *, chunk: int | None = None):
    acc = _acc(o_ref.dtype)
    if chunk is not None:  # a wide row: walk its columns (`_chunked_fwd`)
        return _chunked_fwd(x_ref, o_ref, acc, chunk)
    x = x_ref[...].astype(acc)
    e = jnp.exp(x - jnp.max(x, axis=-1, keepdims=True))
    o_ref[...] = (e / jnp.sum(e, axis=-1, keepdims=True)).astype(o_ref.dtype)


def _bwd_kernel(y_ref, dy_ref, dx_ref, *, chunk: int | None = None):
    acc = _acc(dx_ref.dtype)
    if chunk is not None:
        return _chunked_bwd(y_ref, dy_ref, dx_ref, acc, chunk)
    y, dy = y_ref[...].astype(acc), dy_ref[...].astype(acc)
    dx_ref[...] = (y * (dy - jnp.sum(dy * y, axis=-1, keepdims=True))).astype(dx_ref.dtype)


# ---------------------------------------------------------------- wide whole rows, walked in chunks
# Past CHUNK columns a whole-row block's body walks its columns `chunk` at a time (a fori_loop
# over VMEM slices), so its float32 temporaries are (rows, chunk), not the block's: the block
# then holds as many rows as its input and output buffers fit, and a row of 131072-262144
# columns is read once and written once per call (`RowFootprint.need(..., chunk)` counts its VMEM).
CHUNK = 8192
MIN_DIVIDING_CHUNK = CHUNK // 4
"""A dividing chunk narrower than this loses to CHUNK-wide ones and a narrower last one: on a v5e
softmax at [1046, 128256] (128 x 1002 lanes: 768-column chunks, 167 steps a row) ran at a
fraction of the speed of [882, 152064] (6912-column chunks) (bench/reports/chip_v5e_drawn.json)."""


def chunk_for(cols: int) -> int | None:
    """The column chunk of a wide row's body: the largest multiple of 128 lanes that divides
    `cols` and is at most CHUNK, when that is at least MIN_DIVIDING_CHUNK; else CHUNK, the row
    ending in a narrower last chunk (`_tail`). None (the whole row at once) for rows of at most
    CHUNK columns, or of a width that is no multiple of 128."""
    if export.is_symbolic_dim(cols) or cols <= CHUNK or cols % 128:
        return None
    dividing = next(lanes * 128 for lanes in range(CHUNK // 128, 0, -1) if cols % (lanes * 128) == 0)
    return dividing if dividing >= MIN_DIVIDING_CHUNK else CHUNK


def _tail(ref, n: int, chunk: int, acc):
    """The columns past the last whole chunk (static: `cols % chunk` of them), in float32."""
    return ref[:, n * chunk :].astype(acc)


def _merged(m, total, x):
    """A row's running max m and sum of exp(columns - m), with the columns x merged in (online
    softmax). While the max is still -inf (every column so far masked: -inf logits, or a partial
    block's fill) the exponentials are taken about 0, so exp(-inf - -inf) never makes a NaN: the
    masked columns add 0 and the empty sum's rescale is 0. A row of -inf alone ends at m = -inf
    and total = 0, and its output is NaN, as torch's softmax of such a row."""
    m_new = jnp.maximum(m, jnp.max(x, axis=-1, keepdims=True))
    shift = jnp.where(m_new == -jnp.inf, 0.0, m_new)
    return m_new, total * jnp.exp(m - shift) + jnp.sum(jnp.exp(x - shift), axis=-1, keepdims=True)


def _chunk(c, chunk: int):
    """The columns of chunk c: an index for a block ref's second dimension."""
    return pl.ds(pl.multiple_of(c * chunk, chunk), chunk)


def _columns(ref, c, chunk: int, acc):
    """Chunk c of every row of the block, in float32."""
    return ref[:, _chunk(c, chunk)].astype(acc)


def _chunked_fwd(x_ref, o_ref, acc, chunk: int):
    """The online softmax over the block's chunks (running max m and sum l of exp(x - m)),
    then exp(x - m) / l written chunk by chunk: two reads of the block from VMEM, one write."""
    rows, cols = x_ref.shape
    n, tail = divmod(cols, chunk)

    def stats(c, m_and_sum):
        return _merged(*m_and_sum, _columns(x_ref, c, chunk, acc))

    start = (jnp.full((rows, 1), -jnp.inf, acc), jnp.zeros((rows, 1), acc))
    m, total = jax.lax.fori_loop(0, n, stats, start)
    if tail:
        m, total = _merged(m, total, _tail(x_ref, n, chunk, acc))

    def write(c, carry):
        e = jnp.exp(_columns(x_ref, c, chunk, acc) - m)
        o_ref[:, _chunk(c, chunk)] = (e / total).astype(o_ref.dtype)
        return carry

    jax.lax.fori_loop(0, n, write, 0)
    if tail:
        o_ref[:, n * chunk :] = (jnp.exp(_tail(x_ref, n, chunk, acc) - m) / total).astype(o_ref.dtype)


def _chunked_bwd(y_ref, dy_ref, dx_ref, acc, chunk: int):
    """sum(dy * y) over the block's chunks, then y * (dy - sum) chunk by chunk."""
    rows, cols = y_ref.shape
    n, tail = divmod(cols, chunk)

    def dot(c, s):
        return s + jnp.sum(_columns(y_ref, c, chunk, acc) * _columns(dy_ref, c, chunk, acc), axis=-1, keepdims=True)

    s = jax.lax.fori_loop(0, n, dot, jnp.zeros((rows, 1), acc))
    if tail:
        s = s + jnp.sum(_tail(y_ref, n, chunk, acc) * _tail(dy_ref, n, chunk, acc), axis=-1, keepdims=True)

    def write(c, carry):
        y, dy = _columns(y_ref, c, chunk, acc), _columns(dy_ref, c, chunk, acc)
        dx_ref[:, _chunk(c, chunk)] = (y * (dy - s)).astype(dx_ref.dtype)
        return carry

    jax.lax.fori_loop(0, n, write, 0)
    if tail:
        y, dy = _tail(y_ref, n, chunk, acc), _tail(dy_ref, n, chunk, acc)
        dx_ref[:, n * chunk :] = (y * (dy - s)).astype(dx_ref.dtype)


def _rowwise(
    kernel,
    arrays: list[jax.Array],
    out_dtype,
    block_rows: int | None,
    footprint: RowFootprint,
    op: str,
    flops_per_elem: int,
    transcendentals_per_elem: int,
    chunk: int | None = None,
    backward: bool = False,
) -> jax.Array:
    shape = arrays[0].shape
    cols = shape[-1]
    flat = [a.reshape(-1, cols) for a in arrays]
    rows = flat[0].shape[0]
    itemsize = jnp.dtype(out_dtype).itemsize
    if block_rows is None:  # the whole-row path's default (`_wide` takes the rest)
        br = Config.default(shape, out_dtype, backward=backward).block_rows
    else:
        br = rows_or_refuse(op, rows, cols, itemsize, block_rows, footprint, chunk)
    spec = pl.BlockSpec((br, cols), lambda i: (i, 0))
    n = rows * cols
    out = pl.pallas_call(
        functools.partial(kernel, chunk=chunk),
        out_shape=jax.ShapeDtypeStruct((rows, cols), out_dtype),
        grid=(pl.cdiv(rows, br),),
        in_specs=[spec] * len(flat),
        out_specs=spec,
        compiler_params=row_params(footprint, br, cols, itemsize, chunk=chunk),
        cost_estimate=cost(
            flops_per_elem * n,
            transcendentals_per_elem * n,
            (len(flat) + 1) * n * jnp.dtype(out_dtype).itemsize,
        ),
    )(*flat)
    return out.reshape(shape)


# ---------------------------------------------------------------- rows too wide for one block
WIDE_BLOCK_BYTES = 1 << 20  # of x, a block of the column-tiled kernels


def _wide_blocks(rows: int, cols: int, itemsize: int) -> tuple[int, int]:
    """(rows, columns) per block of the column-tiled kernels: one sublane tile of rows (all of
    them if fewer), and about WIDE_BLOCK_BYTES of x across, a multiple of 128 lanes."""
    br = min(rows, rows_tile(itemsize))
    bc = max(128, WIDE_BLOCK_BYTES // (br * itemsize) // 128 * 128)
    return br, min(bc, -(-cols // 128) * 128)


def _masked(x, j, block_cols: int, cols: int, fill):
    """x with the columns past the row's end (a partial last column block) set to `fill`."""
    if cols % block_cols == 0:
        return x
    col = j * block_cols + jax.lax.broadcasted_iota(jnp.int32, x.shape, 1)
    return jnp.where(col < cols, x, fill)


def _stats_kernel(x_ref, m_ref, l_ref, *, block_cols: int, cols: int):
    """Running max and sum of exp(x - max) of each row over its column blocks (axis 1)."""
    _stats_update(x_ref, m_ref, l_ref, pl.program_id(1), block_cols, cols)


def _stats_update(x_ref, m_ref, l_ref, j, block_cols: int, cols: int):

    @pl.when(j == 0)
    def _init():
        m_ref[...] = jnp.full_like(m_ref, -jnp.inf)
        l_ref[...] = jnp.zeros_like(l_ref)

    x = _masked(x_ref[...].astype(m_ref.dtype), j, block_cols, cols, -jnp.inf)
    m_ref[...], l_ref[...] = _merged(m_ref[...], l_ref[...], x)


def _normalize_kernel(x_ref, m_ref, l_ref, o_ref):
    x = x_ref[...].astype(m_ref.dtype)
    o_ref[...] = (jnp.exp(x - m_ref[...]) / l_ref[...]).astype(o_ref.dtype)


def _dot_kernel(y_ref, dy_ref, s_ref, *, block_cols: int, cols: int):
    """Each row's sum of dy * y over its column blocks (axis 1)."""
    _dot_update(y_ref, dy_ref, s_ref, pl.program_id(1), block_cols, cols)


def _dot_update(y_ref, dy_ref, s_ref, j, block_cols: int, cols: int):

    @pl.when(j == 0)
    def _init():
        s_ref[...] = jnp.zeros_like(s_ref)

    prod = y_ref[...].astype(s_ref.dtype) * dy_ref[...].astype(s_ref.dtype)
    s_ref[...] += jnp.sum(_masked(prod, j, block_cols, cols, 0.0), axis=-1, keepdims=True)


def _wide_bwd_kernel(y_ref, dy_ref, s_ref, dx_ref):
    acc = s_ref.dtype
    y, dy = y_ref[...].astype(acc), dy_ref[...].astype(acc)
    dx_ref[...] = (y * (dy - s_ref[...])).astype(dx_ref.dtype)


def _flat(arrays: list[jax.Array]) -> tuple[list[jax.Array], int, int]:
    """The inputs as (rows, cols), and rows and cols."""
    cols = arrays[0].shape[-1]
    flat = [a.reshape(-1, cols) for a in arrays]
    return flat, flat[0].shape[0], cols


def _two_pass(arrays: list[jax.Array], out_dtype, backward: bool, br: int, bc: int) -> jax.Array:
    shape = arrays[0].shape
    flat, rows, cols = _flat(arrays)
    itemsize = jnp.dtype(out_dtype).itemsize
    acc = _acc(out_dtype)
    grid = (pl.cdiv(rows, br), pl.cdiv(cols, bc))
    block = pl.BlockSpec((br, bc), lambda i, j: (i, j))
    column = pl.BlockSpec((br, 1), lambda i, j: (i, 0))
    stat = jax.ShapeDtypeStruct((rows, 1), acc)
    n = rows * cols
    footprint = WIDE_BACKWARD if backward else WIDE_FORWARD
    reduce_params = row_params(footprint, br, bc, itemsize, ("parallel", "arbitrary"))
    map_params = row_params(footprint, br, bc, itemsize, ("parallel", "parallel"))
    if backward:
        (s,) = pl.pallas_call(
            functools.partial(_dot_kernel, block_cols=bc, cols=cols),
            out_shape=(stat,),
            grid=grid,
            in_specs=[block, block],
            out_specs=(column,),
            compiler_params=reduce_params,
            cost_estimate=cost(2 * n, 0, 2 * n * itemsize),
        )(*flat)
        out = pl.pallas_call(
            _wide_bwd_kernel,
            out_shape=jax.ShapeDtypeStruct((rows, cols), out_dtype),
            grid=grid,
            in_specs=[block, block, column],
            out_specs=block,
            compiler_params=map_params,
            cost_estimate=cost(2 * n, 0, 3 * n * itemsize),
        )(*flat, s)
        return out.reshape(shape)
    m, l = pl.pallas_call(
        functools.partial(_stats_kernel, block_cols=bc, cols=cols),
        out_shape=(stat, stat),
        grid=grid,
        in_specs=[block],
        out_specs=(column, column),
        compiler_params=reduce_params,
        cost_estimate=cost(4 * n, n, n * itemsize),
    )(*flat)
    out = pl.pallas_call(
        _normalize_kernel,
        out_shape=jax.ShapeDtypeStruct((rows, cols), out_dtype),
        grid=grid,
        in_specs=[block, column, column],
        out_specs=block,
        compiler_params=map_params,
        cost_estimate=cost(2 * n, n, 2 * n * itemsize),
    )(*flat, m, l)
    return out.reshape(shape)


# ---------------------------------------------------------------- staged: each block read once
def _staged_need(br: int, bc: int, nj: int, itemsize: int, backward: bool) -> int:
    """VMEM bytes of `_staged`: its column blocks and temporaries, and the VMEM copy of a tile
    of rows of each input (`nj` column blocks wide)."""
    footprint = WIDE_BACKWARD if backward else WIDE_FORWARD
    copies = (2 if backward else 1) * _vmem.padded_rows(br, itemsize) * nj * bc * itemsize
    return footprint.need(br, bc, itemsize) + copies


def _staged_fwd_kernel(x_ref, o_ref, xs_ref, m_ref, l_ref, *, block_cols: int, cols: int):
    """Phase 0: keep the column block, update the row statistics; phase 1: the output block
    from the kept copy (the two-pass kernels' bodies, on the grid's third axis)."""
    p, j = pl.program_id(1), pl.program_id(2)

    @pl.when(p == 0)
    def _read():
        xs_ref[j] = x_ref[...]
        _stats_update(x_ref, m_ref, l_ref, j, block_cols, cols)

    @pl.when(p == 1)
    def _write():
        _normalize_kernel(xs_ref.at[j], m_ref, l_ref, o_ref)


def _staged_bwd_kernel(y_ref, dy_ref, dx_ref, ys_ref, dys_ref, s_ref, *, block_cols: int, cols: int):
    p, j = pl.program_id(1), pl.program_id(2)

    @pl.when(p == 0)
    def _read():
        ys_ref[j] = y_ref[...]
        dys_ref[j] = dy_ref[...]
        _dot_update(y_ref, dy_ref, s_ref, j, block_cols, cols)

    @pl.when(p == 1)
    def _write():
        _wide_bwd_kernel(ys_ref.at[j], dys_ref.at[j], s_ref, dx_ref)


def _staged(arrays: list[jax.Array], out_dtype, backward: bool, br: int, bc: int) -> jax.Array:
    shape = arrays[0].shape
    flat, rows, cols = _flat(arrays)
    itemsize = jnp.dtype(out_dtype).itemsize
    acc = _acc(out_dtype)
    nj = pl.cdiv(cols, bc)
    # phase 0 walks the column blocks; through phase 1 the inputs stay at the last one (not
    # fetched again) and the output walks them (its block index does not move during phase 0,
    # so nothing is written back before phase 1 fills it)
    block_in = pl.BlockSpec((br, bc), lambda i, p, j: (i, j + p * (nj - 1 - j)))
    block_out = pl.BlockSpec((br, bc), lambda i, p, j: (i, j * p))
    copy = pltpu.VMEM((nj, br, bc), flat[0].dtype)
    stat = pltpu.VMEM((br, 1), acc)
    n = rows * cols
    kernel = _staged_bwd_kernel if backward else _staged_fwd_kernel
    scratch = [copy, copy, stat] if backward else [copy, stat, stat]
    out = pl.pallas_call(
        functools.partial(kernel, block_cols=bc, cols=cols),
        out_shape=jax.ShapeDtypeStruct((rows, cols), out_dtype),
        grid=(pl.cdiv(rows, br), 2, nj),
        in_specs=[block_in] * len(flat),
        out_specs=block_out,
        scratch_shapes=scratch,
        compiler_params=_vmem.compiler_params(("parallel", "arbitrary", "arbitrary"),
                                              _staged_need(br, bc, nj, itemsize, backward)),
        cost_estimate=cost((4 if backward else 6) * n, 0 if backward else 2 * n,
                           (len(flat) + 1) * n * itemsize),
    )(*flat)
    return out.reshape(shape)


def _wide(arrays: list[jax.Array], out_dtype, backward: bool) -> jax.Array:
    """Rows too wide for a whole-row block: `_staged` where a tile of rows fits VMEM (under
    the cap a shipped kernel may raise the limit to), else `_two_pass`."""
    cols = arrays[0].shape[-1]
    rows = arrays[0].size // cols
    itemsize = jnp.dtype(out_dtype).itemsize
    br, bc = _wide_blocks(rows, cols, itemsize)
    if _vmem.fits(_staged_need(br, bc, pl.cdiv(cols, bc), itemsize, backward)):
        return _staged(arrays, out_dtype, backward, br, bc)
    return _two_pass(arrays, out_dtype, backward, br, bc)


def _check(x: jax.Array) -> None:
    if x.ndim == 0:
        raise ValueError("softmax: x must have at least one dimension (softmax is over the last).")
    require_float("softmax", x=x)


def softmax(x: jax.Array, *, block_rows: int | None = None) -> jax.Array:
    """Softmax over the last dimension of x.

    block_rows: whole rows per grid step; None sizes the block to the chip's VMEM, and tiles
    the columns too where rows are too wide for a whole-row block."""
    _check(x)
    if is_empty(x):  # as torch: an empty result of x's shape
        return jnp.zeros(x.shape, x.dtype)
    if block_rows is None and Config.default(x.shape, x.dtype).block_rows is None:  # too wide
        return _wide([x], x.dtype, backward=False)
    return _rowwise(_fwd_kernel, [x], x.dtype, block_rows, FORWARD, "softmax", 5, 1, chunk_for(x.shape[-1]))


def softmax_backward(out: jax.Array, grad_out: jax.Array, *, block_rows: int | None = None) -> jax.Array:
    """Gradient of softmax w.r.t. its input, from its output and the output's gradient."""
    if is_empty(out):
        return jnp.zeros(out.shape, out.dtype)
    grad_out = grad_out.astype(out.dtype)
    if block_rows is None and Config.default(out.shape, out.dtype, backward=True).block_rows is None:
        return _wide([out, grad_out], out.dtype, backward=True)
    chunk = chunk_for(out.shape[-1])
    return _rowwise(_bwd_kernel, [out, grad_out], out.dtype, block_rows, BACKWARD, "softmax_backward", 4, 0, chunk,
                    backward=True)


__all__ = ["BACKWARD", "FORWARD", "Config", "softmax", "softmax_backward"]
