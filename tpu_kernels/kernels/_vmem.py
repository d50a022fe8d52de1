"""VMEM budgets of the shipped kernels: when a kernel raises Mosaic's scoped VMEM limit.

Mosaic compiles a kernel against a scoped VMEM limit: 16 MiB by default on v5e and v5p, 32
MiB from v6e on (lowering/target.py). Past it the compile fails (`CompileTimeScopedVmemOom`),
and on a v5e buffers of exactly 16.0 MiB compile for a plain copy but fail where the body holds
temporaries (a bf16 block upcast to float32, a dot's float32 result): they need room beside the
pipeline buffers. So each shipped kernel estimates its own need, `need_bytes` (its pipeline
buffers, scratch and the body's float32 temporaries), and `compiler_params` raises the limit
to that need plus headroom when the need passes `BUDGET`; the raised limit never passes
`CAP`, which fits every TPU generation the defaults are sized for (7x: 64 MiB of VMEM per
TensorCore; v5e, v5p, v6e: 95-128 MiB).
"""

from __future__ import annotations

from jax import export
from jax.experimental.pallas import tpu as pltpu

MIB = 2**20
BUDGET = 12 * MIB  # needs up to this compile under every chip's default limit (16 MiB), headroom kept
CAP = 48 * MIB  # the most a shipped kernel raises the limit to
HEADROOM = 4 * MIB  # beside the estimate, for what it leaves out (masks, iotas, spills)
ROOM = (CAP - HEADROOM) * 4 // 5  # the largest need that `fits`


def limit_for(need_bytes: int) -> int | None:
    """The scoped VMEM limit a kernel needing `need_bytes` asks for (None: the chip's default)."""
    if export.is_symbolic_dim(need_bytes) or need_bytes <= BUDGET:
        return None
    limit = -(-(need_bytes * 5 // 4 + HEADROOM) // MIB) * MIB
    return min(max(limit, 16 * MIB), CAP)


def fits(need_bytes: int) -> bool:
    """Whether a kernel needing `need_bytes` fits under `CAP` with its headroom."""
    return need_bytes * 5 // 4 + HEADROOM <= CAP


def compiler_params(semantics: tuple[str, ...], need_bytes: int) -> pltpu.CompilerParams:
    """Dimension semantics, and a raised scoped VMEM limit where the kernel needs one."""
    limit = limit_for(need_bytes)
    if limit is None:
        return pltpu.CompilerParams(dimension_semantics=semantics)
    return pltpu.CompilerParams(dimension_semantics=semantics, vmem_limit_bytes=limit)


def padded_rows(rows: int, itemsize: int) -> int:
    """Rows as VMEM lays a block out: a multiple of the dtype's sublane tile (8 rows of 32-bit,
    16 of 16-bit)."""
    tile = 8 * max(1, 4 // itemsize)
    return -(-rows // tile) * tile


def padded_cols(cols: int) -> int:
    """Columns as VMEM lays a block out: a multiple of 128 lanes."""
    return -(-cols // 128) * 128


__all__ = ["BUDGET", "CAP", "HEADROOM", "MIB", "ROOM", "compiler_params", "fits", "limit_for", "padded_cols", "padded_rows"]
