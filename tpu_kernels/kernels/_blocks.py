"""Block-size helpers shared by the shipped kernels.

Mosaic (the TPU backend of Pallas) requires the last two dimensions of a
block to be divisible by 8 and 128 respectively, or equal to the array's
dimensions.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jax import export
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from tpu_kernels.errors import FLOAT_DTYPES_TEXT  # the integer-input error's words (Helion ops say it too)
from tpu_kernels.kernels import _vmem

# Kernel wrappers may be traced with symbolic sizes (the fake function under
# torch.compile(dynamic=True)): decisions that need a concrete size fall back
# to the requested block then, which gives the same output shapes.

SUBLANES = 8  # second-to-last block dimension: a multiple of this
LANES = 128  # last block dimension: a multiple of this


ROW_BLOCKS = {"block_rows": [64, 128, 256, 512, 1024]}
"""The row-kernel families' tunable (`tune=`): rows per block that `tpu_kernels.autotune` tries
(row_block rounds each to the sublane multiple and caps it at the rows there are)."""


def row_block(rows: int, target: int) -> int:
    """Rows per block: `target` rounded to the sublane multiple, or all rows if fewer."""
    if export.is_symbolic_dim(rows):
        return target
    if rows <= target:
        return rows
    return max(SUBLANES, target // SUBLANES * SUBLANES)


# A row kernel's default block holds between BLOCK_BYTES_MIN and BLOCK_BYTES_MAX of one input,
# and the grid keeps at least MIN_STEPS steps where the input allows (`auto_rows`). On a v5e
# (bench/reports/chip_v5e_tune.json, chip_v5e_rows_probe.json): the row kernels reach their
# bandwidth plateau from 512 KiB blocks; rmsnorm's backward gains up to 2 MiB at wide rows (bf16
# [4096, 14336]: each doubling of the rows of a block, from 16 to 64, ran nearer the peak), but a
# grid of few steps loses its first read and last write to the pipeline's ends (f32
# [1024, 16384]: 32 steps of 2 MiB ran slower than 64 of 1 MiB).
BLOCK_BYTES_MIN = 1 << 19
BLOCK_BYTES_MAX = 1 << 21
MIN_STEPS = 64


def block_bytes(rows: int, cols: int, itemsize: int) -> float:
    """Bytes of one input a default row block aims at: BLOCK_BYTES_MAX, less where the input
    would then span fewer than MIN_STEPS blocks, never under BLOCK_BYTES_MIN."""
    return max(BLOCK_BYTES_MIN, min(BLOCK_BYTES_MAX, rows * cols * itemsize / MIN_STEPS))


@dataclass(frozen=True)
class RowFootprint:
    """What one row of a row kernel's block costs in VMEM: its `blocks` row-shaped input and
    output blocks (each double-buffered, in the kernel's dtype), `temporaries` float32 arrays
    of the block's shape that the body keeps live (a bf16 block upcast to float32, its
    squares, the output before the cast), `columns` (rows, 1) float32 blocks (a residual
    such as inv_rms, padded to 128 lanes), and whether a (1, cols) `weight` row rides along."""

    blocks: int
    temporaries: int
    columns: int = 0
    weight: bool = False

    def need(self, block_rows: int, cols: int, itemsize: int, chunk: int | None = None) -> int:
        """VMEM bytes of one grid step with `block_rows` rows of width `cols`; a body that walks
        its columns `chunk` at a time (softmax's wide rows) keeps temporaries of that width."""
        width = _vmem.padded_cols(cols)
        io = 2 * self.blocks * _vmem.padded_rows(block_rows, itemsize) * width * itemsize
        temps = self.temporaries * _vmem.padded_rows(block_rows, 4) * _vmem.padded_cols(chunk or cols) * 4
        residual = 2 * self.columns * _vmem.padded_rows(block_rows, 4) * 128 * 4
        weight = 2 * 8 * width * 4 if self.weight else 0  # double-buffered, padded to 8 float32 rows
        return io + temps + residual + weight


def rows_tile(itemsize: int) -> int:
    """A row block's natural multiple: the dtype's sublane tile (8 rows of 32-bit, 16 of 16-bit)."""
    return SUBLANES * max(1, 4 // itemsize)


def auto_rows(rows: int, cols: int, itemsize: int, footprint: RowFootprint, chunk: int | None = None) -> int | None:
    """The default rows per block: the largest power of two of rows that holds at most
    `block_bytes` of one input (or the next one up, where that holds under `BLOCK_BYTES_MIN`)
    and whose VMEM need (with the body's float32 temporaries)
    fits what a shipped kernel may raise Mosaic's scoped limit to (`_vmem.fits`; `row_params`
    raises it past `_vmem.BUDGET`), at least one sublane tile; all rows when there are fewer.
    None when even one tile of rows does not fit (rows too wide for a whole-row block).

    The limit is raised rather than the block shrunk: on a v5e rmsnorm's backward in bf16 at
    [8192, 4096] ran nearer the HBM peak with 128-row (1 MiB) blocks than with the 64-row ones
    that fit the default limit (bench/reports/chip_v5e_tune.json)."""
    if export.is_symbolic_dim(rows) or export.is_symbolic_dim(cols):
        return 8 * SUBLANES
    tile = rows_tile(itemsize)
    if not _vmem.fits(footprint.need(min(rows, tile), cols, itemsize, chunk)):
        return None
    target = block_bytes(rows, cols, itemsize) / max(1, cols * itemsize)
    # a power of two: it divides the usual row counts (80-row blocks at [8192, 4096] bf16 ran
    # rmsnorm's backward at less than half the speed of 64-row ones on a v5e, when that
    # backward still padded a partial last block with a copy; bench/reports/chip_v5e*.json)
    br = max(tile, 1 << (int(target).bit_length() - 1)) if target >= 1 else tile
    if br * cols * itemsize < BLOCK_BYTES_MIN:
        # rounded down past the floor: the next power of two, at most twice the floor. On a v5e
        # (bench/reports/chip_v5e_drawn.json, drawn_tune) rmsnorm at [2793, 5120] bf16 and
        # [1300, 5120] f32 ran faster in one program with the doubled block, backward most
        br *= 2
    while br > tile and not _vmem.fits(footprint.need(br, cols, itemsize, chunk)):
        br //= 2
    return rows if rows <= br else br


def rows_or_refuse(op: str, rows: int, cols: int, itemsize: int, block_rows: int | None, footprint: RowFootprint,
                   chunk: int | None = None) -> int:
    """`block_rows` as given (rounded to the sublane multiple, capped at the rows), or the
    default; refuses a given block whose VMEM need passes what a shipped kernel may ask for."""
    if block_rows is None:
        br = auto_rows(rows, cols, itemsize, footprint, chunk)
        # rows too wide for the cap even one tile at a time: one tile, with the scoped limit
        # raised as far as the cap allows (`row_params`). The CPU runs it as before; a TPU whose
        # VMEM cannot hold it says so when it compiles (softmax tiles its columns instead).
        return min(rows, rows_tile(itemsize)) if br is None else br
    br = row_block(rows, block_rows)
    need = footprint.need(br, cols, itemsize, chunk)
    if not export.is_symbolic_dim(need) and not _vmem.fits(need):
        fit = max(SUBLANES, int(_vmem.ROOM / (need / br)) // SUBLANES * SUBLANES)
        raise ValueError(
            f"{op}: block_rows={block_rows} needs about {need / _vmem.MIB:.0f} MiB of VMEM at rows of {cols} "
            f"elements ({itemsize}-byte), over the {_vmem.CAP // _vmem.MIB} MiB a shipped kernel may use; "
            f"pass block_rows <= {fit}, or leave it unset (None) for a block sized to the chip."
        )
    return br


def row_params(footprint: RowFootprint, block_rows: int, cols: int, itemsize: int,
               semantics: tuple[str, ...] = ("parallel",), chunk: int | None = None) -> pltpu.CompilerParams:
    """A row kernel's compiler params: its grid's semantics ("parallel": see `parallel_rows`), and Mosaic's
    scoped VMEM limit raised where the block needs it (`_vmem.compiler_params`)."""
    return _vmem.compiler_params(semantics, footprint.need(block_rows, cols, itemsize, chunk))




def require_float(op: str, **arrays: jax.Array) -> None:
    """The shipped kernels compute in floating point (float32 accumulation): integer and
    bool inputs are refused, as torch's own softmax and norms refuse them
    (`NotImplementedError: "rms_norm" not implemented for 'Int'`), rather than rounded
    through float32 and cast back (rmsnorm on int32 [[3, 4]] returned [[0, 1]])."""
    for name, a in arrays.items():
        if not jnp.issubdtype(a.dtype, jnp.floating):
            raise TypeError(
                f"{op}: argument '{name}' has dtype {a.dtype}; {op} computes in floating point and "
                f"accepts {FLOAT_DTYPES_TEXT}. Convert it first (for example x.float())."
            )


def is_empty(*arrays: jax.Array) -> bool:
    """Some input has a zero-size dimension (concrete shapes only): such calls skip the
    kernel, whose grid would have zero-size blocks, and compute the (empty or all-zero)
    result directly, as torch does."""
    return any(not export.is_symbolic_dim(d) and d == 0 for a in arrays for d in a.shape)


def check_aligned(what: str, block: int, multiple: int) -> None:
    if block <= 0 or block % multiple:
        raise ValueError(f"{what}={block} must be a positive multiple of {multiple} (TPU tiling).")


def parallel_rows() -> pltpu.CompilerParams:
    """Compiler params of a 1-D grid over row blocks: each step reads and writes only its
    own block (no accumulator carried between steps), so the axis is "parallel" and chips
    with two TensorCores per device (v4, v5p, 7x) split it between them; left unset,
    Mosaic treats every axis as "arbitrary" and runs the grid on one core."""
    return pltpu.CompilerParams(dimension_semantics=("parallel",))


def lanes(x: jax.Array, n: int) -> jax.Array:
    """A (rows, 128) lane-replicated value as (rows, n): its first n lanes, whole vregs
    repeated, or (n neither, or symbolic: shapes only) its first lane broadcast."""
    if not export.is_symbolic_dim(n):
        if n <= LANES:
            return x[:, :n]
        if n % LANES == 0:
            return jnp.tile(x, (1, n // LANES))
    return jnp.broadcast_to(x[:, :1], (x.shape[0], n))


def cost(flops, transcendentals, bytes_accessed) -> pl.CostEstimate | None:
    """A CostEstimate for XLA's scheduler and the benchmark roofline; None while
    the sizes are symbolic (CostEstimate takes ints only)."""
    values = (flops, transcendentals, bytes_accessed)
    if any(export.is_symbolic_dim(v) for v in values):
        return None
    return pl.CostEstimate(
        flops=int(flops), transcendentals=int(transcendentals), bytes_accessed=int(bytes_accessed)
    )


def bf16(shape: tuple[int, ...]) -> jax.ShapeDtypeStruct:
    """An example argument for the TPU lowering check."""
    return jax.ShapeDtypeStruct(tuple(shape), jnp.bfloat16)
