"""Block-size helpers shared by the shipped kernels.

Mosaic (the TPU backend of Pallas) requires the last two dimensions of a
block to be divisible by 8 and 128 respectively, or equal to the array's
dimensions.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import export
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from tpu_kernels.errors import FLOAT_DTYPES_TEXT  # the integer-input error's words (Helion ops say it too)

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
