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

# Kernel wrappers may be traced with symbolic sizes (the fake function under
# torch.compile(dynamic=True)): decisions that need a concrete size fall back
# to the requested block then, which gives the same output shapes.

SUBLANES = 8  # second-to-last block dimension: a multiple of this
LANES = 128  # last block dimension: a multiple of this


def row_block(rows: int, target: int) -> int:
    """Rows per block: `target` rounded to the sublane multiple, or all rows if fewer."""
    if export.is_symbolic_dim(rows):
        return target
    if rows <= target:
        return rows
    return max(SUBLANES, target // SUBLANES * SUBLANES)


def check_aligned(what: str, block: int, multiple: int) -> None:
    if block <= 0 or block % multiple:
        raise ValueError(f"{what}={block} must be a positive multiple of {multiple} (TPU tiling).")


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
