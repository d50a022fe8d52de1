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
- an axis along which the body carries state through scratch memory (a buffer read at a
  step before that step writes it, so it holds an earlier step's value: a running sum, an
  accumulator; `lowering_check/scratch.py`) must run in order too: marked "parallel", the second
  core starts from a scratch buffer no earlier step wrote. That is an error as well (a
  cumsum whose carry axis was "parallel" returned NaN in the TPU interpreter).
- an axis left "arbitrary" (or unspecified) along which every output moves and no scratch
  buffer carries state: its steps are independent, so marking it "parallel" lets a two-core
  chip use both cores. That is a performance hint (a warning); none is given for a kernel
  whose scratch use the reading cannot follow (a DMA into scratch).

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

# The readings of a pallas_call's grid live in the core, which the sharding-rule derivation
# shares (the core never imports lowering_check/); the names stay importable from here.
from tpu_kernels.lowering.pallas_grid import PARALLEL_KINDS, declared_semantics, depends_on, moving_axes
from tpu_kernels.lowering.pallas_grid import in_hbm as _in_hbm
from tpu_kernels.lowering_check import scratch


@dataclass(frozen=True)
class AxisFinding:
    kind: str  # "error" or "hint"
    axis: int
    message: str


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
    carry = scratch.carried(eqn)
    carries = carry.axes(n_grid)
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
        elif axis in carries and sem in PARALLEL_KINDS:
            findings.append(
                AxisFinding(
                    "error",
                    axis,
                    f"grid axis {axis} is marked {sem!r}, but the body carries state from step to step "
                    f"along it: {carry.why(axis)}. On chips with two TensorCores the 'parallel' axis is "
                    "split between the cores, and the second core starts from a scratch buffer no "
                    "earlier step wrote (NaN in the TPU interpreter; one-core chips look right). Mark "
                    "the axis 'arbitrary' in pltpu.CompilerParams(dimension_semantics=...).",
                )
            )
        elif not still and sem == "arbitrary" and axis not in carries and not carry.unknown:
            how = (
                "is marked 'arbitrary'"
                if declared is not None
                else "has no dimension_semantics (so 'arbitrary')"
            )
            findings.append(
                AxisFinding(
                    "hint",
                    axis,
                    f"grid axis {axis} {how}, yet every output's block moves along it and no scratch "
                    "buffer carries state along it, so its steps are independent: mark it 'parallel' "
                    "in pltpu.CompilerParams(dimension_semantics=...) so that chips with two "
                    "TensorCores (v4, v5p, 7x) split it between both cores.",
                )
            )
    return findings


__all__ = [
    "PARALLEL_KINDS",
    "AxisFinding",
    "check_semantics",
    "declared_semantics",
    "depends_on",
    "moving_axes",
]
