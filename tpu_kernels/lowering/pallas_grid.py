"""What one traced `pallas_call` says about its grid, read without running it.

Shared by the TPU check (`lowering_check/semantics.py`: an accumulation axis marked
"parallel") and the sharding-rule derivation (`sharding/derive.py`: which array
dims a "parallel" axis walks block by block). Both need the same three readings of
a `pallas_call` equation:

- `declared_semantics`: the kernel's `dimension_semantics`;
- `depends_on` / `axis_dependence`: which grid indices each dimension of a block
  index is computed from (a data-flow walk of the index map's jaxpr, so a grid of
  size 1 along an axis is judged as a large one);
- `block_dims`: each block's size per array dimension (squeezed dims are 1).

It lives in the core because the core's derivation needs it and the core never
imports `lowering_check/` (tests/test_layers.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

PARALLEL_KINDS = ("parallel", "core_parallel", "subcore_parallel")


def declared_semantics(eqn: Any) -> tuple[str, ...] | None:
    """The kernel's `dimension_semantics` as lower-case strings, or None when unset."""
    params = eqn.params.get("compiler_params")
    if isinstance(params, dict):  # older JAX: {"mosaic_tpu": CompilerParams(...)}
        params = next(iter(params.values()), None)
    sems = getattr(params, "dimension_semantics", None)
    if sems is None:
        return None
    return tuple(str(getattr(s, "value", s)).lower() for s in sems)


def semantics(eqn: Any) -> tuple[str, ...]:
    """Each grid axis's semantics; "arbitrary" (Mosaic's default) where none is declared."""
    n_grid = len(eqn.params["grid_mapping"].grid)
    declared = declared_semantics(eqn) or ()
    return tuple(declared[a] if a < len(declared) else "arbitrary" for a in range(n_grid))


def sub_jaxprs(value: Any) -> list[Any]:
    """The jaxprs held by one equation parameter (a jaxpr, a closed jaxpr, or a tuple of them)."""
    out = []
    if hasattr(value, "eqns"):
        out.append(value)
    elif hasattr(value, "jaxpr") and hasattr(value.jaxpr, "eqns"):
        out.append(value.jaxpr)
    elif isinstance(value, (tuple, list)):
        for v in value:
            out += sub_jaxprs(v)
    return out


def depends_on(jaxpr: Any) -> list[frozenset[int]]:
    """For each output of `jaxpr`, the indices of the inputs it is computed from.

    Equations holding sub-jaxprs (a nested jit, a cond) count every input as used:
    conservative, it can only add dependencies."""
    deps: dict[Any, frozenset[int]] = {v: frozenset({i}) for i, v in enumerate(jaxpr.invars)}

    def of(atom: Any) -> frozenset[int]:
        return deps.get(atom, frozenset()) if not hasattr(atom, "val") else frozenset()

    for eqn in jaxpr.eqns:
        used = frozenset().union(*(of(a) for a in eqn.invars)) if eqn.invars else frozenset()
        for v in eqn.outvars:
            deps[v] = used
    return [of(v) for v in jaxpr.outvars]


def index_map(bm: Any) -> Any:
    """A block mapping's index map as a plain jaxpr (its inputs: the grid indices)."""
    closed = bm.index_map_jaxpr
    return closed.jaxpr if hasattr(closed, "jaxpr") else closed


def axis_dependence(bm: Any, n_grid: int) -> list[frozenset[int]]:
    """For each array dimension of one block mapping, the grid axes its block index reads."""
    return [frozenset(i for i in d if i < n_grid) for d in depends_on(index_map(bm))]


def moving_axes(bm: Any, n_grid: int) -> set[int]:
    """The grid axes along which one block mapping's block moves."""
    axes: set[int] = set()
    for d in axis_dependence(bm, n_grid):
        axes |= d
    return axes


def block_index(bm: Any, point: tuple[int, ...]) -> tuple[int, ...]:
    """The block index the index map gives at one grid point."""
    import jax

    closed = bm.index_map_jaxpr
    consts = closed.consts if hasattr(closed, "consts") else ()
    args = [np.int32(p) for p in point]
    return tuple(int(v) for v in jax.core.eval_jaxpr(index_map(bm), consts, *args))


def block_dims(bm: Any) -> tuple[tuple[int, ...], tuple[bool, ...]] | None:
    """Elements per block and squeezed flags per array dimension, or None for block
    dimensions given as element offsets or slices (`pl.Element`, `pl.BoundedSlice`)."""
    sizes, squeezed = [], []
    for d in bm.block_shape:
        name = type(d).__name__
        if d is None or name == "Squeezed":
            sizes.append(1)
            squeezed.append(True)
        elif name == "Blocked":
            sizes.append(int(d.block_size))
            squeezed.append(False)
        elif isinstance(d, (int, np.integer)):
            sizes.append(int(d))
            squeezed.append(False)
        else:
            return None
    return tuple(sizes), tuple(squeezed)


def in_hbm(bm: Any) -> bool:
    """The operand stays in HBM (`memory_space=pl.ANY`): the kernel copies it by hand, so
    its index map says nothing."""
    space = str(getattr(bm.block_aval, "memory_space", "")).lower()
    return "any" in space or "hbm" in space


def kernel_name(eqn: Any) -> str:
    """The kernel function's name, as the TPU check's report shows it."""
    debug = getattr(eqn.params.get("jaxpr"), "debug_info", None)
    name = getattr(debug, "func_name", None) or eqn.params.get("name") or "kernel"
    return str(name)


def position_axes(eqn: Any) -> set[int]:
    """The grid axes whose index or size the kernel body reads (`pl.program_id(a)`,
    `pl.num_programs(a)`): such a body can compute global positions from them."""
    axes: set[int] = set()
    for e in _equations(eqn.params["jaxpr"]):
        if e.primitive.name in ("program_id", "num_programs"):
            axes.add(int(e.params["axis"]))
    return axes


def _equations(jaxpr: Any) -> Iterator[Any]:
    jaxpr = jaxpr.jaxpr if hasattr(jaxpr, "jaxpr") and not hasattr(jaxpr, "eqns") else jaxpr
    for e in jaxpr.eqns:
        yield e
        for value in e.params.values():
            for sub in sub_jaxprs(value):
                yield from _equations(sub)


def grid_points(grid: tuple[int, ...]) -> np.ndarray:
    """Every point of a grid (n, len(grid)), int32, in the order the pipeline visits them
    (row-major, the last axis fastest); one point of no axes for an empty grid."""
    return np.indices(grid).reshape(len(grid), -1).T.astype(np.int32) if grid else np.zeros((1, 0), np.int32)


def block_indices(bm: Any, points: np.ndarray, prefetched: list[Any]) -> np.ndarray:
    """The block indices (n, rank) one block mapping's index map gives at grid points
    (n, len(grid)), its scalar-prefetch Refs read from `prefetched` (the Refs discharged:
    a pure function of the grid indices and the prefetched values)."""
    import jax

    from tpu_kernels import _compat

    pure = _compat.get("jax_discharge_state")(bm.index_map_jaxpr)
    jaxpr, consts = (pure.jaxpr, pure.consts) if hasattr(pure, "consts") else (pure, [])
    rank = len(bm.array_aval.shape)

    def at(*g: Any) -> list:
        return jax.core.eval_jaxpr(jaxpr, consts, *g, *prefetched)[:rank]  # then the Refs' values

    if points.shape[1]:
        out = jax.vmap(at)(*(points[:, a] for a in range(points.shape[1])))
    else:
        out = at()
    return np.stack([np.broadcast_to(np.asarray(o, np.int64), (len(points),)) for o in out], axis=1)


__all__ = [
    "PARALLEL_KINDS",
    "axis_dependence",
    "block_dims",
    "block_index",
    "block_indices",
    "grid_points",
    "declared_semantics",
    "depends_on",
    "in_hbm",
    "index_map",
    "kernel_name",
    "moving_axes",
    "position_axes",
    "semantics",
    "sub_jaxprs",
]
