"""Estimate the VMEM a Pallas TPU kernel needs per grid step, from its traced jaxpr.

For each `pallas_call` in the traced function, the estimate adds up:

- every input and output block that lives in VMEM (BlockSpecs in the default
  or VMEM memory space), times its number of pipeline buffers: 2 (double
  buffering: the next block is copied in while this one is computed), 1 for a
  block that is the whole array with an all-zero index map (Mosaic
  single-buffers those), or the `pipeline_mode=pl.Buffered(n)` given;
- every VMEM scratch buffer (`pltpu.VMEM(shape, dtype)`), once.

Each buffer is rounded up to whole tiles as Mosaic lays it out (`tiling.py`, from
Mosaic's memref layout inference): the last dimension to a multiple of 128 lanes,
the second-to-last to a multiple of 8 rows (fewer rows: a power of two of at least
the dtype's packing). The dtype's larger native tile (16 rows for 16-bit types, 32
for 8-bit) is used only when the rows divide by it, so it never adds padding; a
packed block off its native tile is a performance warning of the check instead
(lowering.py). Not counted: operands in HBM
(`memory_space=pl.ANY`), SMEM (scalar prefetch, `pltpu.SMEM`), semaphores,
and the temporaries Mosaic allocates for intermediate values inside the body,
so a kernel with large intermediates needs more than the estimate.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from tpu_kernels.check import tiling
from tpu_kernels.lowering import jaxprs

# Mosaic's default scoped VMEM limit varies by chip (check/chips.py: SCOPED_VMEM_BYTES); this
# is the smallest, kept for callers that have no target chip.
DEFAULT_SCOPED_LIMIT = 16 * 2**20


@dataclass(frozen=True)
class Buffer:
    what: str  # "input 0", "output 1", "scratch 0"
    shape: tuple[int, ...]
    dtype: str
    copies: int  # pipeline buffers (1 for scratch)
    bytes: int  # all copies, tile padding included


@dataclass(frozen=True)
class KernelFootprint:
    """One pallas_call: its grid and the VMEM buffers it holds during a grid step."""

    kernel: str
    grid: tuple[int, ...]
    buffers: tuple[Buffer, ...]
    vmem_limit_bytes: int | None  # from pltpu.CompilerParams, if the kernel sets it
    wide_dtypes: tuple[str, ...]  # 64-bit dtypes among the blocks (Mosaic rejects them)

    @property
    def bytes(self) -> int:
        return sum(b.bytes for b in self.buffers)


def tile_bytes(shape: tuple[int, ...], dtype: Any) -> int:
    """Bytes of one buffer of `shape` in VMEM, rounded up to whole tiles (`tiling.padded_shape`)."""
    if not shape:
        return np.dtype(dtype).itemsize
    return -(-math.prod(tiling.padded_shape(shape, dtype)) * tiling.bitwidth(dtype) // 8)


def memref_shape(bm: Any) -> tuple[int, ...]:
    """A block as the Mosaic kernel sees it: squeezed (None) dimensions kept, as size 1
    (lowering.py `_get_block_shape`), which decides which dimension is tiled by rows."""
    dims = []
    for d in bm.block_shape:
        size = getattr(d, "block_size", d)
        dims.append(1 if d is None or type(d).__name__ == "Squeezed" else int(size))
    return tuple(dims)


def _memory_space(aval: Any) -> str:
    return str(getattr(aval, "memory_space", "")).lower().rsplit(".", 1)[-1]


def _in_vmem(aval: Any) -> bool:
    return _memory_space(aval) in ("", "default", "vmem", "none")


def _vmem_limit(compiler_params: Any) -> int | None:
    params = compiler_params
    if isinstance(params, dict):  # older JAX: {"mosaic_tpu": CompilerParams(...)}
        params = next(iter(params.values()), None)
    return getattr(params, "vmem_limit_bytes", None)


_kernel_name = jaxprs.kernel_name


def footprint(eqn: Any) -> KernelFootprint:
    """The VMEM footprint of one `pallas_call` equation."""
    gm = eqn.params["grid_mapping"]
    buffers: list[Buffer] = []
    wide: set[str] = set()
    n_in = gm.num_inputs
    for i, bm in enumerate(gm.block_mappings):
        what = f"input {i}" if i < n_in else f"output {i - n_in}"
        aval = bm.block_aval
        dtype = np.dtype(bm.array_aval.dtype)
        if dtype.itemsize == 8:
            wide.add(str(dtype))
        if not _in_vmem(aval):
            continue
        shape = tuple(int(d) for d in aval.shape)
        size = tile_bytes(memref_shape(bm), dtype)
        if bm.pipeline_mode is not None and isinstance(bm.pipeline_mode.buffer_count, int):
            copies = bm.pipeline_mode.buffer_count
        else:
            copies = 1 if bm.has_trivial_window() else 2
        buffers.append(Buffer(what, shape, str(dtype), copies, copies * size))
    for j, aval in enumerate(gm.scratch_avals):
        if _memory_space(aval) != "vmem":
            continue  # SMEM scratch, semaphores
        inner = getattr(aval, "inner_aval", aval)
        shape, dtype = tuple(int(d) for d in inner.shape), np.dtype(inner.dtype)
        if dtype.itemsize == 8:
            wide.add(str(dtype))
        buffers.append(Buffer(f"scratch {j}", shape, str(dtype), 1, tile_bytes(shape, dtype)))
    grid = tuple(int(g) if isinstance(g, (int, np.integer)) else -1 for g in gm.grid)
    return KernelFootprint(
        _kernel_name(eqn),
        grid,
        tuple(buffers),
        _vmem_limit(eqn.params.get("compiler_params")),
        tuple(sorted(wide)),
    )


pallas_calls = jaxprs.pallas_calls


def traced_pallas_calls(fn: Callable, *specs: Any) -> list[Any]:
    """Trace `fn` at `specs` (ShapeDtypeStructs): its pallas_call equations."""
    return list(pallas_calls(jax.make_jaxpr(fn)(*specs)))


def kernel_footprints(fn: Callable, *specs: Any) -> list[KernelFootprint]:
    """Trace `fn` at `specs` (ShapeDtypeStructs) and estimate each of its Pallas kernels."""
    return [footprint(eqn) for eqn in traced_pallas_calls(fn, *specs)]


def fmt_bytes(n: int) -> str:
    for unit, size in (("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"
