"""Estimate the VMEM a Pallas TPU kernel needs per grid step, from its traced jaxpr.

For each `pallas_call` in the traced function, the estimate adds up:

- every input and output block that lives in VMEM (BlockSpecs in the default
  or VMEM memory space), times its number of pipeline buffers: 2 (double
  buffering: the next block is copied in while this one is computed), 1 for a
  block that is the whole array with an all-zero index map (Mosaic
  single-buffers those), or the `pipeline_mode=pl.Buffered(n)` given;
- every VMEM scratch buffer (`pltpu.VMEM(shape, dtype)`), once, but for one that every step
  writes before reading and whose values outlive no reduction or matmul
  (`scratch.forwarded`): the compiler forwards its stores to its loads and allocates nothing.

Each buffer is rounded up to whole tiles as Mosaic lays it out (`tiling.py`, from
Mosaic's memref layout inference): the last dimension to a multiple of 128 lanes,
the second-to-last to a multiple of 8 rows (fewer rows: a power of two of at least
the dtype's packing). The dtype's larger native tile (16 rows for 16-bit types, 32
for 8-bit) is used only when the rows divide by it, so it never adds padding; a
packed block off its native tile is a performance warning of the check instead
(lowering.py). Beside the buffers, the values the body holds in VMEM (`temporaries.py`). Not
counted: operands in HBM (`memory_space=pl.ANY`), SMEM (scalar prefetch, `pltpu.SMEM`) and
semaphores.

A kernel fits when its estimate is at most the VMEM it may use (`verdict`): on a v5e the
compiler's scoped allocation for a kernel's buffers is their sum to the byte, and buffers of
exactly the limit compile (docs/tpu-lowering-check.md, "Calibration against a v5e").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from tpu_kernels.lowering import jaxprs
from tpu_kernels.lowering_check import scratch, temporaries, tiling

# Mosaic's default scoped VMEM limit varies by chip (lowering/target.py: SCOPED_VMEM_BYTES); this
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
    """One pallas_call: its grid, the VMEM buffers it holds during a grid step, and the VMEM its
    body's own values take (`temporaries.py`)."""

    kernel: str
    grid: tuple[int, ...]
    buffers: tuple[Buffer, ...]
    vmem_limit_bytes: int | None  # from pltpu.CompilerParams, if the kernel sets it
    wide_dtypes: tuple[str, ...]  # 64-bit dtypes among the blocks (Mosaic rejects them)
    temporaries: int = 0  # the body's values held in VMEM (float32 upcasts, scores, ...)

    @property
    def bytes(self) -> int:
        """The buffers' bytes (blocks and scratch)."""
        return sum(b.bytes for b in self.buffers)

    @property
    def estimate(self) -> int:
        """All the VMEM the kernel needs per grid step: buffers and the body's temporaries."""
        return self.bytes + self.temporaries


tile_bytes = tiling.tile_bytes


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
    grid = tuple(int(g) if isinstance(g, (int, np.integer)) else -1 for g in gm.grid)
    one_step = all(g == 1 for g in grid)  # nothing to prefetch: every block single-buffered
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
            copies = 1 if one_step or bm.has_trivial_window() else 2
        buffers.append(Buffer(what, shape, str(dtype), copies, copies * size))
    not_held = scratch.forwarded(eqn) if gm.scratch_avals else set()
    for j, aval in enumerate(gm.scratch_avals):
        if _memory_space(aval) != "vmem":
            continue  # SMEM scratch, semaphores
        inner = getattr(aval, "inner_aval", aval)
        shape, dtype = tuple(int(d) for d in inner.shape), np.dtype(inner.dtype)
        if dtype.itemsize == 8:
            wide.add(str(dtype))
        if j in not_held:  # written before it is read at every step: stores forwarded to loads
            buffers.append(Buffer(f"scratch {j} (not held)", shape, str(dtype), 0, 0))
            continue
        buffers.append(Buffer(f"scratch {j}", shape, str(dtype), 1, tile_bytes(shape, dtype)))
    return KernelFootprint(
        _kernel_name(eqn),
        grid,
        tuple(buffers),
        _vmem_limit(eqn.params.get("compiler_params")),
        tuple(sorted(wide)),
        temporaries.estimate(eqn),
    )


@dataclass(frozen=True)
class Verdict:
    """A kernel's estimate against the VMEM it may use on one chip."""

    fits: bool
    estimate: int  # KernelFootprint.estimate
    limit: int  # the bytes it may use: its vmem_limit_bytes, the default scoped limit, or the core's VMEM
    limit_name: str  # which of them, in words

    @property
    def margin(self) -> int:
        """By how much the estimate clears the limit (negative: over it)."""
        return self.limit - self.estimate

    def describe(self) -> str:
        """ "clears the 16.0 MiB default scoped VMEM limit of a TPU v5e by 3.2 MiB" (or "misses ... by")."""
        word = "clears" if self.fits else "misses"
        return f"{word} {self.limit_name} by {fmt_bytes(abs(self.margin))}"


def verdict(k: KernelFootprint, target: Any) -> Verdict:
    """Whether `k` fits on `target` (a `lowering.target.Chip`): its estimate within the kernel's own
    vmem_limit_bytes, or else the chip's default scoped limit; an estimate beyond the core's
    VMEM is compared with that (no limit can help). On a v5e, buffers of exactly the limit
    compile (16.0 of 16.0 MiB, 32.0 of 32.0, 64.0 of 64.0): the compiler keeps no headroom."""
    core = f"the {fmt_bytes(target.vmem_bytes)} of VMEM a TPU {target.name} core has"
    if k.estimate > target.vmem_bytes or (k.vmem_limit_bytes or 0) > target.vmem_bytes:
        limit, name = target.vmem_bytes, core
    elif k.vmem_limit_bytes:
        limit, name = k.vmem_limit_bytes, f"its vmem_limit_bytes ({fmt_bytes(k.vmem_limit_bytes)})"
    else:
        limit = target.scoped_vmem_bytes
        name = f"the {fmt_bytes(limit)} default scoped VMEM limit of a TPU {target.name}"
    return Verdict(k.estimate <= limit, k.estimate, limit, name)


pallas_calls = jaxprs.pallas_calls


def traced_pallas_calls(fn: Callable, *specs: Any) -> list[Any]:
    """Trace `fn` at `specs` (ShapeDtypeStructs): its pallas_call equations."""
    return list(pallas_calls(jax.make_jaxpr(fn)(*specs)))


def traced_kernels(fn: Callable, *specs: Any) -> list[tuple[Any, list[Any]]]:
    """Trace `fn` at `specs`: each pallas_call equation with the values of its operands the
    trace fixed (`lowering.jaxprs.constant_operands`: a step table built at trace time)."""
    jaxpr = jax.make_jaxpr(fn)(*specs)
    known = jaxprs.constant_operands(jaxpr)
    return [(eqn, known.get(id(eqn), [])) for eqn in pallas_calls(jaxpr)]


def kernel_footprints(fn: Callable, *specs: Any) -> list[KernelFootprint]:
    """Trace `fn` at `specs` (ShapeDtypeStructs) and estimate each of its Pallas kernels."""
    return [footprint(eqn) for eqn in traced_pallas_calls(fn, *specs)]


def fmt_bytes(n: int) -> str:
    for unit, size in (("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"
