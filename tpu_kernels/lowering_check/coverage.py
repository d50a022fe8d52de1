"""Does the grid write every output element, and does every block start inside its array?

From one traced `pallas_call` (its grid, BlockSpecs and array shapes) this evaluates each
block's index map over the grid, without running the kernel:

- an output element that no grid step's block covers is never written: on TPU it holds whatever
  the buffer held (in the CPU interpreter, often NaN). The commonest Pallas bug is
  `grid=(n // block,)` where `pl.cdiv(n, block)` was meant.
- a block whose index map puts it entirely past the array (its first element beyond the last):
  on TPU it reads or writes memory outside the array. A partial edge block (it starts inside
  and runs past the end) is legal: Pallas masks it.

Exact when the grid has at most `MAX_POINTS` points: the index maps are evaluated at every grid
point (vectorised with `jax.vmap`). Above that, each index map is evaluated along every grid
axis with the others at 0 and assumed to be a sum of per-axis terms (true of the affine maps
kernels use: `(i, j)`, `(i, 0)`, `(2 * i + 1, k)`), checked at `SAMPLES` random grid points;
a map that fails that, or whose output dimensions share a grid axis, is not checked (a warning
says so).

Not checked: outputs aliased to an input (`input_output_aliases`: the unwritten part keeps the
input's values), operands in `pl.ANY`/HBM memory (the kernel copies them by hand), index maps
that read scalar-prefetch operands, grids with dynamic sizes, and `pl.Element`/`pl.BoundedSlice`
block dimensions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from tpu_kernels.lowering import pallas_grid

MAX_POINTS = 100_000  # grid points evaluated exactly (vmapped: about 0.2-0.3 s at 316x316 here)
MAX_MASK = 10_000_000  # blocks of one output tracked one by one when describing a gap
SAMPLES = 1_000  # random grid points that confirm the per-axis model of a large grid


@dataclass(frozen=True)
class Finding:
    """One problem of one operand: `kind` is "coverage" or "out-of-bounds"."""

    kind: str
    message: str


@dataclass(frozen=True)
class _Operand:
    what: str  # "input 0", "output 1"
    shape: tuple[int, ...]
    block: tuple[int, ...]  # elements per block along each dimension (1 for a squeezed one)
    squeezed: tuple[bool, ...]
    jaxpr: Any

    @property
    def nblocks(self) -> tuple[int, ...]:
        return tuple(-(-s // b) for s, b in zip(self.shape, self.block))

    def block_words(self) -> str:
        dims = ["None" if sq else str(b) for b, sq in zip(self.block, self.squeezed)]
        return f"({', '.join(dims)}{',' if len(dims) == 1 else ''})"


def _dim_words(d: int, rank: int, lo: int, hi: int) -> str:
    span = f"{lo}" if lo == hi else f"{lo}-{hi}"
    if rank == 1:
        return f"element{'s' if lo != hi else ''} {span}"
    if d == rank - 2:
        return f"row{'s' if lo != hi else ''} {span}"
    if d == rank - 1:
        return f"column{'s' if lo != hi else ''} {span}"
    return f"indices {span} of dimension {d}"


def _element_range(op: _Operand, d: int, lo: int, hi: int) -> tuple[int, int]:
    """Block indices lo..hi along dimension d as the element range they cover (inclusive)."""
    return lo * op.block[d], min((hi + 1) * op.block[d], op.shape[d]) - 1


def _shape_words(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape)) or "scalar"


def _grid_words(grid: tuple[int, ...]) -> str:
    return f"({', '.join(map(str, grid))}{',' if len(grid) == 1 else ''})"


def _eval_index_map(op: _Operand, points: np.ndarray) -> np.ndarray:
    """Block indices (n, rank) of `op` at grid points (n, len(grid))."""
    jaxpr = op.jaxpr
    rank = len(op.shape)
    if points.shape[1] == 0:  # no grid: one step, an index map of no arguments
        out = jax.core.eval_jaxpr(jaxpr, jaxpr.consts)
        return np.broadcast_to(np.asarray(out, dtype=np.int64).reshape(1, rank), (len(points), rank))
    cols = [np.ascontiguousarray(points[:, a]).astype(np.int32) for a in range(points.shape[1])]
    out = jax.vmap(lambda *g: jax.core.eval_jaxpr(jaxpr, jaxpr.consts, *g))(*cols)
    if not out:
        return np.zeros((len(points), 0), np.int64)
    return np.stack([np.broadcast_to(np.asarray(o, np.int64), (len(points),)) for o in out], axis=1)


# ---- bounds -------------------------------------------------------------------------------


def _bounds(op: _Operand, idx: np.ndarray, points: np.ndarray, grid: tuple[int, ...]) -> Finding | None:
    """A block that starts past the end of its array (or before its start)."""
    nb = np.asarray(op.nblocks)
    bad = (idx < 0) | (idx >= nb)
    if not bad.any():
        return None
    row, d = (int(v) for v in np.argwhere(bad)[0])
    b = int(idx[row, d])
    rank = len(op.shape)
    first = b * op.block[d]
    where = _dim_words(d, rank, first, first + op.block[d] - 1)
    point = _grid_words(tuple(int(v) for v in points[row])) if grid else "()"
    reads = "reads" if op.what.startswith("input") else "writes"
    return Finding(
        "out-of-bounds",
        f"the index map of {op.what} (shape {_shape_words(op.shape)}, block {op.block_words()}) "
        f"gives block {b} along dimension {d} at grid point {point}: {where}, entirely outside "
        f"the array (size {op.shape[d]} there); on TPU that block {reads} memory outside the array. Keep "
        f"block indices below pl.cdiv({op.shape[d]}, {op.block[d]}) = {nb[d]} (grid={_grid_words(grid)}).",
    )


# ---- coverage -----------------------------------------------------------------------------


def _fix(op: _Operand, d: int, grid: tuple[int, ...], drives: int | None) -> str:
    size, block = op.shape[d], op.block[d]
    need = -(-size // block)
    if drives is None:  # no axis is the block index itself: one sized by floor division?
        drives = next((a for a, g in enumerate(grid) if g == size // block and g < need), None)
    if drives is not None and grid[drives] < need:
        parts = [str(g) for g in grid]
        parts[drives] = f"pl.cdiv({size}, {block})" if block > 1 else str(size)
        return f"use grid=({', '.join(parts)}{',' if len(parts) == 1 else ''})"
    return (
        f"make the grid and index map visit all pl.cdiv({size}, {block}) = {need} blocks along dimension {d}"
    )


def _identity_axis(d: int, idx: np.ndarray, points: np.ndarray) -> int | None:
    """The grid axis whose index is the block index along dimension d, if one is."""
    for a in range(points.shape[1]):
        if np.array_equal(idx[:, d], points[:, a]):
            return a
    return None


def _gap(op: _Operand, missing: np.ndarray, grid: tuple[int, ...], drives: list[int | None]) -> Finding:
    """Describe the blocks marked in `missing` (a boolean array of op.nblocks)."""
    rank = len(op.shape)
    where = np.argwhere(missing)
    lo, hi = where.min(axis=0), where.max(axis=0)
    box = int(np.prod(hi - lo + 1))
    partial = [d for d in range(rank) if lo[d] > 0 or hi[d] < op.nblocks[d] - 1]
    words = [_dim_words(d, rank, *_element_range(op, d, int(lo[d]), int(hi[d]))) for d in partial]
    head = f"{op.what} (shape {_shape_words(op.shape)})"
    if box == len(where) and words:
        single = all(lo[d] == hi[d] and op.block[d] == 1 for d in partial)
        region = f"{', '.join(words)} of {head} {'is' if single else 'are'} never written"
    elif box == len(where):
        region = f"all of {head} is never written"
    else:
        first = [
            _dim_words(d, rank, *_element_range(op, d, int(where[0][d]), int(where[0][d])))
            for d in range(rank)
        ]
        region = (
            f"{len(where)} of {missing.size} blocks of {head} are never written, the first at "
            f"{', '.join(first)}"
        )
    d = partial[0] if partial else 0
    return Finding(
        "coverage",
        f"{region}: grid={_grid_words(grid)}, block {op.block_words()}; {_fix(op, d, grid, drives[d])}.",
    )


def _coverage_exact(
    op: _Operand, idx: np.ndarray, points: np.ndarray, grid: tuple[int, ...]
) -> Finding | None:
    nb = op.nblocks
    total = math.prod(nb)
    inside = idx[((idx >= 0) & (idx < np.asarray(nb))).all(axis=1)] if len(idx) else idx
    linear = np.ravel_multi_index(tuple(inside.T), nb) if len(inside) else np.zeros(0, np.int64)
    seen = np.unique(linear)
    if len(seen) == total:
        return None
    drives = [_identity_axis(d, idx, points) if len(idx) else None for d in range(len(nb))]
    if total <= MAX_MASK:
        missing = np.ones(total, bool)
        missing[seen] = False
        return _gap(op, missing.reshape(nb), grid, drives)
    for d in range(len(nb)):  # too many blocks to mark: a dimension with unvisited block indices
        unvisited = np.setdiff1d(np.arange(nb[d]), inside[:, d])
        if len(unvisited):
            return _projected(op, d, unvisited, grid, drives[d])
    return Finding(
        "coverage",
        f"only {len(seen)} of the {total} blocks {op.block_words()} of {op.what} (shape "
        f"{_shape_words(op.shape)}) are written: grid={_grid_words(grid)}; make the grid visit every block.",
    )


def _projected(
    op: _Operand, d: int, unvisited: np.ndarray, grid: tuple[int, ...], drive: int | None
) -> Finding:
    """No block with these indices along dimension d is visited: those slabs are never written."""
    rank = len(op.shape)
    lo, hi = int(unvisited.min()), int(unvisited.max())
    some = "" if hi - lo + 1 == len(unvisited) else "some of "
    first, last = _element_range(op, d, lo, hi)
    words = _dim_words(d, rank, first, last)
    verb = "is" if first == last and not some else "are"
    return Finding(
        "coverage",
        f"{some}{words} of {op.what} (shape {_shape_words(op.shape)}) {verb} never written: "
        f"grid={_grid_words(grid)}, block {op.block_words()}; {_fix(op, d, grid, drive)}.",
    )


def _per_axis(
    op: _Operand, grid: tuple[int, ...]
) -> tuple[list[np.ndarray], np.ndarray, np.ndarray, list[np.ndarray]] | None:
    """For a large grid: each output dimension's block indices as base + (one axis's term).

    Returns (per-dimension sets of visited block indices, the axis driving each dimension or -1,
    the indices at grid point 0, each axis's term), or None when the index map is not a sum of per-axis terms with one axis per dimension."""
    rank = len(op.shape)
    zero = np.zeros((1, len(grid)), np.int64)
    base = _eval_index_map(op, zero)[0]
    terms = []
    for a, n in enumerate(grid):
        line = np.zeros((n, len(grid)), np.int64)
        line[:, a] = np.arange(n)
        terms.append(_eval_index_map(op, line) - base)  # (n, rank)
    rng = np.random.default_rng(0)
    sample = np.stack([rng.integers(0, n, SAMPLES) for n in grid], axis=1)
    model = base + sum(terms[a][sample[:, a]] for a in range(len(grid)))
    if not np.array_equal(_eval_index_map(op, sample), model):
        return None
    drive = np.full(rank, -1)
    for d in range(rank):
        moving = [a for a in range(len(grid)) if terms[a][:, d].any()]
        if len(moving) > 1:
            return None
        if moving:
            drive[d] = moving[0]
    if len(set(drive[drive >= 0].tolist())) != int((drive >= 0).sum()):
        return None  # two dimensions move with one axis (a diagonal): not a product of sets
    sets = [
        np.unique(base[d] + terms[drive[d]][:, d]) if drive[d] >= 0 else np.asarray([base[d]])
        for d in range(rank)
    ]
    return sets, drive, base, terms


def _check_large(op: _Operand, grid: tuple[int, ...], is_output: bool) -> tuple[list[Finding], str | None]:
    model = _per_axis(op, grid)
    if model is None:
        return [], (
            f"coverage and bounds of {op.what} not checked: its grid has {math.prod(grid)} points "
            f"(more than {MAX_POINTS}) and its index map is not one grid axis per dimension"
        )
    sets, drive, base, terms = model
    found: list[Finding | None] = []
    for d, visited in enumerate(sets):
        outside = visited[(visited < 0) | (visited >= op.nblocks[d])]
        if len(outside):  # the grid point that reaches it: only the driving axis is nonzero
            point = np.zeros((1, len(grid)), np.int64)
            idx = base[None, :].copy()
            if drive[d] >= 0:
                v = int(np.flatnonzero(base[d] + terms[drive[d]][:, d] == outside[0])[0])
                point[0, drive[d]] = v
                idx = idx + terms[drive[d]][v]
            found.append(_bounds(op, idx, point, grid))
            break
    if is_output:
        for d, visited in enumerate(sets):
            unvisited = np.setdiff1d(np.arange(op.nblocks[d]), visited)
            if len(unvisited):
                identity = drive[d] >= 0 and np.array_equal(visited, np.arange(grid[drive[d]]))
                found.append(_projected(op, d, unvisited, grid, int(drive[d]) if identity else None))
                break
    return [f for f in found if f is not None], None


def check_kernel(eqn: Any, operands: list[Any] | None = None) -> tuple[list[Finding], list[str]]:
    """The coverage and bounds findings of one `pallas_call` equation, and warnings for what
    it could not check. `operands`: the values of its operands the trace fixed
    (`lowering.jaxprs.constant_operands`): index maps that read scalar-prefetch tables are
    checked where the trace fixed the tables (attention's causal walk), at small grids."""
    from tpu_kernels.lowering.pallas_grid import block_indices, grid_points
    from tpu_kernels.lowering_check.vmem import _memory_space

    gm = eqn.params["grid_mapping"]
    if gm.num_dynamic_grid_bounds:
        return [], []  # the grid is dynamic
    prefetched = list(operands or [])[: gm.num_index_operands]
    if gm.num_index_operands and (len(prefetched) < gm.num_index_operands or any(v is None for v in prefetched)):
        return [], []  # index maps read scalar-prefetch values the trace did not fix
    grid = tuple(int(g) for g in gm.grid)
    aliased = {int(o) for _, o in eqn.params.get("input_output_aliases", ())}
    n_in = gm.num_inputs
    findings: list[Finding] = []
    warnings: list[str] = []
    small = math.prod(grid) <= MAX_POINTS
    points = grid_points(grid) if small else None
    for i, bm in enumerate(gm.block_mappings):
        is_output = i >= n_in
        what = f"output {i - n_in}" if is_output else f"input {i}"
        if _memory_space(bm.transformed_block_aval) in ("any", "hbm", "semaphore", "semaphore_mem"):
            continue
        dims = pallas_grid.block_dims(bm)
        shape = tuple(int(s) for s in bm.array_aval.shape)
        if dims is None or math.prod(shape) == 0:
            continue
        jaxpr = bm.index_map_jaxpr
        jaxpr = jaxpr if hasattr(jaxpr, "eqns") else jaxpr.jaxpr
        op = _Operand(what, shape, dims[0], dims[1], jaxpr)
        if gm.num_index_operands:  # the tables' values are known: the block indices at every step
            if not small:
                warnings.append(
                    f"coverage and bounds of {op.what} not checked: its index map reads a scalar-prefetch "
                    f"table and its grid has {math.prod(grid)} points (over {MAX_POINTS})"
                )
                continue
            idx = block_indices(bm, points, prefetched)
        elif not small:
            found, warning = _check_large(op, grid, is_output and (i - n_in) not in aliased)
            findings += found
            warnings += [warning] if warning else []
            continue
        else:
            idx = _eval_index_map(op, points)
        bad = _bounds(op, idx, points, grid)
        if bad is not None:
            findings.append(bad)
        if is_output and (i - n_in) not in aliased:
            gap = _coverage_exact(op, idx, points, grid)
            if gap is not None:
                findings.append(gap)
    return findings, warnings
