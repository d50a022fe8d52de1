"""How Mosaic tiles a block in VMEM, per dtype: the padding, and packed dtypes off their native tile.

A TPU vector register is 8 sublanes x 128 lanes of 32 bits. Narrower dtypes are packed
into each 32-bit sublane: 2 bfloat16/float16 values, 4 int8/fp8 values, so a register
natively holds a (16, 128) bfloat16 or (32, 128) int8 tile (`nativeTiling` in Mosaic's
`xla/mosaic/dialect/tpu/layout.cc`: `{sublanes * packing, lanes}`).

What Mosaic does with a block (a pallas_call operand's VMEM window, or a scratch buffer:
both are arguments of the Mosaic kernel) is decided by its memref layout inference,
`getTilingFactor` and `inferLayout` in `xla/mosaic/dialect/tpu/transforms/infer_memref_layout.cc`
(openxla/xla, read 2026-08; `jaxlib/mosaic/dialect/tpu/transforms/` in older jax-ml/jax):

- The tile's rows for a 2-D+ block whose second-to-last dimension is `rows`: the native
  `8 * packing` when XLA enables large tiles for the dtype (`use_x8_large_second_minor`,
  `use_x16_...`) and `rows` divides by it; otherwise 8 when `rows >= 8` (for every dtype
  of 4 bits or more); otherwise the smallest power of two from `packing` up that reaches
  `rows` (the generation >= 4 branch; v2/v3 start from `2 * packing`). The last dimension is
  tiled by 128 lanes. The block is padded to whole tiles (`inferMemref`: `alignTo`).
- A 1-D block: the same with `ceil(n / 128)` rows of 128 and no large tile ("1D tiling is
  always compact").

So Mosaic never rejects an int8 block of (8, 128) (Pallas' own rule, `_check_block_mappings`
in `jax/_src/pallas/mosaic/lowering.py`, asks only for multiples of 8 and 128 in the last two
dimensions, or the whole dimension, for every dtype; a 1-D block must be the whole array, a
multiple of 1024 elements or a power of two of at least `128 * packing`), and its VMEM is not
padded either: it is laid out in (8, 128) tiles instead of the native (32, 128). The vector
loads of the body keep the memref's tiling (`infer_vector_layout.cc`, `vector::LoadOp`), so
whatever needs the native layout (reductions, `MultiDimReductionOp`; matmul operands; some
reshapes) relayouts it first. That is a performance warning of the check, not an error. What
Mosaic's later passes make of it is seen only on a TPU.

Older Mosaic (before the divisibility test in `getTilingFactor`) took the large tile whenever
`rows` reached it: int8 rows of 40 were padded to 64 there, 40 here.
"""

from __future__ import annotations

import math
from typing import Any

import jax.numpy as jnp
import numpy as np

LANES = 128
SUBLANES = 8


def bitwidth(dtype: Any) -> int:
    """Bits per element as Mosaic stores it (bool refs are int32: lowering.py BOOL_MEMREF_TYPE)."""
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return 32
    if jnp.issubdtype(dt, jnp.floating):
        return int(jnp.finfo(dt).bits)
    if jnp.issubdtype(dt, jnp.integer):
        return int(jnp.iinfo(dt).bits)
    return dt.itemsize * 8


def packing(dtype: Any) -> int:
    """Values per 32-bit sublane: 1 for 32-bit types, 2 for 16-bit, 4 for 8-bit."""
    return max(1, 32 // bitwidth(dtype))


def native_rows(dtype: Any) -> int:
    """Rows of the dtype's native (rows, 128) tile: 8 x packing (layout.cc `nativeTiling`)."""
    return SUBLANES * packing(dtype)


def _tiling_factor(rows: int, dtype: Any, *, large: bool, one_d: bool) -> int:
    """`getTilingFactor` of infer_memref_layout.cc, for TPU generations >= 4."""
    pack = packing(dtype)
    sublanes = max(SUBLANES, pack)  # tiling_sublane: a tile holds at least one packed row group
    if one_d:
        big = sublanes
    elif bitwidth(dtype) == 2 or (large and pack > 1):
        big = native_rows(dtype)
    else:
        big = sublanes
    if rows % big:
        big = sublanes
    if big <= rows:
        return big
    tile = pack
    while tile < min(rows, sublanes):
        tile *= 2
    return tile


def tile_rows(rows: int, dtype: Any, *, large: bool = True) -> int:
    """The rows of the tiles Mosaic lays a block with `rows` second-to-last rows out in.

    `large`: whether XLA lets Mosaic use the large (native) tile for 8- and 16-bit types; it
    changes which tile is chosen, never the padding (the large tile is taken only when the
    rows divide by it)."""
    return _tiling_factor(rows, dtype, large=large, one_d=False)


def padded_shape(shape: tuple[int, ...], dtype: Any) -> tuple[int, ...]:
    """The shape of a block in VMEM: rounded up to whole tiles (`inferMemref`)."""
    if not shape:
        return ()
    dims = list(shape)
    if len(dims) == 1:
        tile = _tiling_factor(-(-dims[0] // LANES), dtype, large=False, one_d=True) * LANES
        return (-(-dims[0] // tile) * tile,)
    dims[-1] = -(-dims[-1] // LANES) * LANES
    rows = tile_rows(dims[-2], dtype)
    dims[-2] = -(-dims[-2] // rows) * rows
    return tuple(dims)


def tile_bytes(shape: tuple[int, ...], dtype: Any) -> int:
    """Bytes of one buffer of `shape` in VMEM, rounded up to whole tiles (`padded_shape`)."""
    if not shape:
        return np.dtype(dtype).itemsize
    return -(-math.prod(padded_shape(shape, dtype)) * bitwidth(dtype) // 8)


def off_native_tile(block: tuple[int, ...], array: tuple[int, ...], dtype: Any) -> int | None:
    """The tile rows a packed-dtype block gets instead of its native tile, or None when it
    gets the native tile, is not packed, is 1-D, or spans the whole dimension (then no
    other block size is possible)."""
    if len(block) < 2 or packing(dtype) == 1:
        return None
    rows = block[-2]
    if rows % native_rows(dtype) == 0 or rows == array[-2]:
        return None
    return tile_rows(rows, dtype)


def off_native_message(what: str, block: tuple[int, ...], array: tuple[int, ...], dtype: Any) -> str:
    """The performance warning for a block that `off_native_tile` flags."""
    name = np.dtype(dtype).name
    rows, native = block[-2], native_rows(dtype)
    tile = tile_rows(rows, dtype)
    better = (-(-rows // native) * native, *block[-1:])
    return (
        f"block {tuple(block)} of {what} ({name}[{', '.join(map(str, array))}]) has {rows} rows, not a "
        f"multiple of {native}: the TPU packs {packing(dtype)} {name} values into each 32-bit sublane, so "
        f"{name}'s native tile is ({native}, 128), and Mosaic uses it only for blocks whose rows divide by "
        f"{native}. This block is laid out in ({tile}, 128) tiles, which the kernel's loads keep, so "
        "reductions, matmuls and reshapes of it are relaid out first (slower; not an error). Use a "
        f"multiple of {native} rows, e.g. ({', '.join(map(str, better))}), or the whole dimension "
        f"({array[-2]})."
    )
