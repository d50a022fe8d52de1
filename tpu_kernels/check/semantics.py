"""Grid dimension semantics against the BlockSpecs: which axes may run in parallel.

A TPU chip with two TensorCores per device (v4, v5p, 7x) splits each grid axis marked
"parallel" between its cores; axes marked "arbitrary" (the default when a kernel sets no
`dimension_semantics`) run in order on one core. From one traced `pallas_call` this reads
each output's index map (a small jaxpr over the grid indices) and finds, per grid axis,
whether the output's block moves along it:

- an axis along which some output's block does NOT move is an accumulation axis: every
  step along it revisits the same output block (matmul's k, an attention kernel's kv axis).
  Marked "parallel", the two cores would each write their partial result to that block with
  no ordering: a wrong result on chips with two cores, right on one-core chips and in every
  CPU interpreter. That is an error.
- an axis left "arbitrary" (or unspecified) along which every output moves: steps are
  independent unless the body carries state between them in scratch memory, so marking it
  "parallel" lets a two-core chip use both cores. That is a performance hint (a warning).

Deterministic: it reads which grid indices each index map's outputs are computed from (a
data-flow walk of the jaxpr), not values at the example's grid, so a grid of size 1 or 2
along an axis is judged the same as a large one. An index map that uses an index only
through arithmetic that cancels it (`i * 0`) counts as moving: conservative for the error.
Outputs in HBM (`memory_space=pl.ANY`) are copied by hand and have no meaningful index
map: they are left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PARALLEL_KINDS = ("parallel", "core_parallel", "subcore_parallel")


@dataclass(frozen=True)
class AxisFinding:
    kind: str  # "error" or "hint"
    axis: int
    message: str


def declared_semantics(eqn: Any) -> tuple[str, ...] | None:
    """The kernel's `dimension_semantics` as lower-case strings, or None when unset."""
    params = eqn.params.get("compiler_params")
    if isinstance(params, dict):  # older JAX: {"mosaic_tpu": CompilerParams(...)}
        params = next(iter(params.values()), None)
    sems = getattr(params, "dimension_semantics", None)
    if sems is None:
        return None
    return tuple(str(getattr(s, "value", s)).lower() for s in sems)


def _sub_jaxprs(value: Any) -> list[Any]:
    out = []
    if hasattr(value, "eqns"):
        out.append(value)
    elif hasattr(value, "jaxpr") and hasattr(value.jaxpr, "eqns"):
        out.append(value.jaxpr)
    elif isinstance(value, (tuple, list)):
        for v in value:
            out += _sub_jaxprs(v)
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


def moving_axes(bm: Any, n_grid: int) -> set[int]:
    """The grid axes along which one block mapping's block moves."""
    closed = bm.index_map_jaxpr
    jaxpr = closed.jaxpr if hasattr(closed, "jaxpr") else closed
    axes: set[int] = set()
    for d in depends_on(jaxpr):
        axes |= {i for i in d if i < n_grid}
    return axes


def _in_hbm(bm: Any) -> bool:
    space = str(getattr(bm.block_aval, "memory_space", "")).lower()
    return "any" in space or "hbm" in space


def check_semantics(eqn: Any) -> list[AxisFinding]:
    """Errors (an accumulation axis marked parallel) and hints (an independent axis left
    sequential) for one `pallas_call` equation."""
    gm = eqn.params["grid_mapping"]
    n_grid = len(gm.grid)
    if n_grid == 0:
        return []
    declared = declared_semantics(eqn)
    sems = declared if declared is not None else ("arbitrary",) * n_grid
    outputs = [(j, bm) for j, bm in enumerate(gm.block_mappings[gm.num_inputs :]) if not _in_hbm(bm)]
    if not outputs:
        return []
    moves = {j: moving_axes(bm, n_grid) for j, bm in outputs}
    findings = []
    for axis in range(n_grid):
        still = [j for j, axes in moves.items() if axis not in axes]
        sem = sems[axis] if axis < len(sems) else "arbitrary"
        if still and sem in PARALLEL_KINDS:
            outs = ", ".join(f"output {j}" for j in still)
            findings.append(
                AxisFinding(
                    "error",
                    axis,
                    f"grid axis {axis} is marked {sem!r}, but the block of {outs} does not move along "
                    f"it: every step along axis {axis} revisits the same output block (an accumulation "
                    "axis, like matmul's k). On chips with two TensorCores the 'parallel' axis is split "
                    "between the cores, which then write that block with no ordering between them: a "
                    "wrong result there, though CPU interpreters and one-core chips look right. Mark "
                    "the axis 'arbitrary' in pltpu.CompilerParams(dimension_semantics=...).",
                )
            )
        elif not still and sem == "arbitrary":
            how = (
                "is marked 'arbitrary'"
                if declared is not None
                else "has no dimension_semantics (so 'arbitrary')"
            )
            findings.append(
                AxisFinding(
                    "hint",
                    axis,
                    f"grid axis {axis} {how}, yet every output's block moves along it, so its steps "
                    "look independent: unless the body carries state between steps in scratch "
                    "memory, mark it 'parallel' in pltpu.CompilerParams(dimension_semantics=...) so "
                    "that chips with two TensorCores (v4, v5p, 7x) split it between both cores.",
                )
            )
    return findings
