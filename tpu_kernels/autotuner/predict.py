"""A TPU chip's ranking of candidate configs without the chip: the TPU check prunes, a cost
model ranks the rest. Every figure this module gives is *predicted*, never measured.

Pruning: each candidate is lowered for the target chip (`lowering_check.lowering.check_call`: Mosaic's
lowering through `jax.export`, block shapes and tiling, the VMEM a grid step needs against the
chip's scoped limit, grid coverage and dimension semantics). A candidate with any problem is
pruned, with the check's explanation; it is never run.

The cost model, per `pallas_call` of the traced kernel:

    kernel = max(compute, memory, vector) + steps * STEP_OVERHEAD_S + prologue

and per call, over its kernels: `time = max(DISPATCH_FLOOR_S, sum of kernel)`.

- memory: the HBM bytes the pipeline moves, over the chip's HBM bandwidth times HBM_EFFICIENCY. A block is copied
  in (or written back) whenever its block index changes between consecutive grid steps
  (row-major order, the last axis fastest), so an operand whose index map reads only the
  outer axes is fetched once per outer step: `prod(grid[:a+1])` copies, `a` the innermost
  grid axis of size > 1 that its index map reads (one copy when it reads none). An index map
  that reads scalar-prefetch tables the trace fixed (attention's causal walk) is evaluated at
  every grid step (up to MAX_WALKED_STEPS) and its changes counted. Operands left
  in HBM (`memory_space=pl.ANY`) count their whole array once.
- compute: the kernel body's `dot_general`s, 2*M*N*K flops each on every grid step that runs
  it (`body.read`: a dot under a `pl.when` counts on the steps whose predicate holds, so a
  causal attention's skipped blocks cost no flops), at the chip's peak MXU rate for the
  operands' dtype and the precision the dot was traced at (bfloat16/float16 at the bf16 peak,
  int8 at the int8 peak; float32 at "highest" at FLOAT32_MXU_FRACTION of the bf16 peak, a
  multi-pass bf16 product, at "high" a third of it, at JAX's default one bf16 pass: the bf16
  peak; the tuner traces a kernel at the matmul precision its calls will run at,
  runtime/precision.py), times MXU_EFFICIENCY and
  the MXU's utilisation: M and N below the MXU's width (`mxu_column_size`: 128 on v5e, 256 on
  v6e and 7x) fill that fraction of it.
- vector: the body's other array operations in vreg operations (`body.read`: each result in
  native (8, 128) tiles, so an (n, 1) column costs what an (n, 128) block does), counted on the
  steps that run them, at VPU_OPS_PER_CYCLE per cycle of the chip's clock (`ChipFigures.clock_hz`).
  The DMA engine, the MXU and the vector unit work side by side: the largest of the three
  bounds a kernel.
- steps * STEP_OVERHEAD_S: a fixed cost per grid step (DMA issue and synchronisation, loop
  control), fitted to a v5e's row sweeps (below).
- prologue: the first step's input blocks, which no compute hides.
- DISPATCH_FLOOR_S: a call cannot finish sooner than the host dispatches it. Candidates whose
  kernels are predicted below it tie, and a tie goes to the declared order, the default first
  (`select.choose_predicted`), as a measured tie does: the model never moves an op off its
  default for a difference that no call of it would show.

The chip's figures (peak rates, HBM bandwidth, MXU width and count) are JAX's, `pltpu.get_tpu_info_for_chip`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tpu_kernels.autotuner import body
from tpu_kernels.lowering import pallas_grid

# From a TPU v5e's records by bench/chip_tuning.py (bench/reports/chip_v5e_tuning_fit.json),
# least squares in log time on a grid: STEP_OVERHEAD_S and HBM_EFFICIENCY from the tuning
# sweeps' rows (bench/reports/chip_v5e_tune.json, commit 4a855dd: rmsnorm bf16[8192, 4096] and
# softmax f32[4096, 4096], 8-256 rows a block: fixed bytes, 32 to 1024 steps), then
# MXU_EFFICIENCY from its bf16 matmul sweeps (162 compiled configs at 5 shapes, commits 4a855dd
# and 453fcf7; its float32 sweep ran at one bf16 pass, not fitted); DISPATCH_FLOOR_S is
# that record's own measure of a call's dispatch (`meta.dispatch_floor_s`), FLOAT32_MXU_FRACTION
# bench/reports/chip_v5e.json's bf16 4096^3 time over float32's at "highest".
# VPU_OPS_PER_CYCLE is assumed, not fitted (the row sweeps' residual is least at it, but they
# cannot pin it: the choices hardly move across a wide range of it). How near the measured
# best the model's choices come is bench/reports/chip_v5e_tuning_fit.json, tabled in
# docs/autotuning.md, "Against a TPU v5e"; the shipped measured v5e matmul table, not this
# model, decides at its shapes.
STEP_OVERHEAD_S = 0.21e-6
"""Seconds per grid step beyond the step's data movement and compute (fitted, see above)."""

FLOAT32_MXU_FRACTION = 0.174
"""float32 dots (at "highest", torch's default precision) run at this fraction of the bf16 rate:
about six bf16 passes on a v5e, not the three assumed before (measured, see above)."""

MXU_EFFICIENCY = 0.95
"""The share of the MXU's peak rate a kernel's dots reach at full utilisation (fitted)."""

HBM_EFFICIENCY = 0.86
"""The share of the chip's HBM bandwidth the pipeline's copies reach (fitted)."""

VPU_OPS_PER_CYCLE = 1.0
"""Vreg operations the vector unit completes per clock cycle (assumed, see above)."""

DISPATCH_FLOOR_S = 123.6e-6
"""Seconds a call takes at least: the host's dispatch of it, measured on the v5e development
machine (gVisor) beside the sweeps. A property of that host, not of the chip."""

# The most grid steps whose blocks' copies are counted by walking the grid (a kernel whose
# index maps read step tables the trace fixed); past it, a block moving along an axis is copied
# at every step of that axis and the axes before it.
MAX_WALKED_STEPS = 1 << 16

FITTED = ("STEP_OVERHEAD_S", "FLOAT32_MXU_FRACTION", "MXU_EFFICIENCY", "HBM_EFFICIENCY", "DISPATCH_FLOOR_S")
"""The constants bench/chip_tuning.py takes from a chip's records (bench/reports/chip_v5e_tuning_fit.json)."""

MODEL = (
    "roofline per pallas_call: max(MXU flops / peak * utilisation, pipelined HBM bytes / bandwidth, "
    f"vreg operations / {VPU_OPS_PER_CYCLE:g} per cycle) + {STEP_OVERHEAD_S * 1e6:g} us per grid step + the first "
    f"step's input blocks; a call at least {DISPATCH_FLOOR_S * 1e6:g} us (dispatch)"
)


@dataclass(frozen=True)
class ChipFigures:
    name: str
    bf16_flops: float
    int8_flops: float
    hbm_bytes_per_s: float
    mxu_width: int
    mxus: int = 1

    @property
    def clock_hz(self) -> float:
        """The clock JAX's figures imply: the bf16 peak over the MXUs' multiply-adds per cycle
        (1.50 GHz on a v5e: four 128x128 MXUs, 197 TFLOP/s)."""
        return self.bf16_flops / (2 * self.mxus * self.mxu_width**2)

    @classmethod
    def of(cls, chip: str) -> ChipFigures:
        from jax.experimental.pallas import tpu as pltpu

        info = pltpu.get_tpu_info_for_chip(pltpu.ChipVersion(chip), 1)
        return cls(
            chip,
            float(info.bf16_ops_per_second),
            float(info.int8_ops_per_second or info.bf16_ops_per_second),
            float(info.mem_bw_bytes_per_second),
            int(info.mxu_column_size),
            int(info.num_mxus or 1),
        )


@dataclass
class Prediction:
    """One candidate's predicted time on one chip, and its parts (summed over its kernels)."""

    seconds: float  # the call: its kernels, at least DISPATCH_FLOOR_S
    kernel_s: float = 0.0  # its kernels alone
    compute_s: float = 0.0
    memory_s: float = 0.0
    vector_s: float = 0.0
    prologue_s: float = 0.0
    steps: int = 0
    hbm_bytes: float = 0.0
    mxu_flops: float = 0.0
    vreg_ops: float = 0.0
    mxu_utilisation: float | None = None
    kernels: list[str] = field(default_factory=list)
    model: str = "roofline"  # what priced `seconds`: this module's roofline, or the op's `cost=`

    def to_dict(self) -> dict[str, Any]:
        return {
            "predicted_s": self.seconds,
            "kernel_s": self.kernel_s,
            "compute_s": self.compute_s,
            "memory_s": self.memory_s,
            "vector_s": self.vector_s,
            "prologue_s": self.prologue_s,
            "grid_steps": self.steps,
            "hbm_bytes": self.hbm_bytes,
            "mxu_flops": self.mxu_flops,
            "vreg_ops": self.vreg_ops,
            "mxu_utilisation": self.mxu_utilisation,
            "model": self.model,
        }


def predict(eqns: list[Any], chip: ChipFigures, operands: list[list[Any]] | None = None) -> Prediction:
    """The cost model over the `pallas_call` equations of one traced call; `operands`, per
    equation, the values of its operands the trace fixed (`body.read` reads its step tables)."""
    total = Prediction(0.0)
    weighted_util = 0.0
    for n, eqn in enumerate(eqns):
        gm = eqn.params["grid_mapping"]
        grid = tuple(int(g) for g in gm.grid)
        steps = math.prod(grid) if grid else 1
        traffic, prologue = 0.0, 0.0
        tables = _tables(gm, operands[n] if operands else None, steps)
        for i, bm in enumerate(gm.block_mappings):
            nbytes = _block_bytes(bm)
            if pallas_grid.in_hbm(bm):
                traffic += _array_bytes(bm)
                continue
            if nbytes is None or not _in_vmem(bm):
                continue
            if tables is not None:
                copies = _copies(bm, grid, tables)
            else:
                moving = [a for a in pallas_grid.moving_axes(bm, len(grid)) if grid[a] > 1]
                copies = math.prod(grid[: max(moving) + 1]) if moving else 1
            traffic += copies * nbytes
            if i < gm.num_inputs:
                prologue += nbytes
        work = body.read(eqn, operands[n] if operands else None)
        compute, flops = 0.0, 0.0
        for d in work.dots:
            f = 2.0 * d.m * d.n * d.k * d.batch * d.steps
            u = min(1.0, d.m / chip.mxu_width) * min(1.0, d.n / chip.mxu_width)
            compute += f / (_peak(chip, d.dtype, d.precision) * u * MXU_EFFICIENCY)
            flops += f
            weighted_util += f * u
        memory = traffic / (chip.hbm_bytes_per_s * HBM_EFFICIENCY)
        vector = work.vreg_ops / (chip.clock_hz * VPU_OPS_PER_CYCLE)
        first = prologue / (chip.hbm_bytes_per_s * HBM_EFFICIENCY)
        total.kernel_s += max(compute, memory, vector) + steps * STEP_OVERHEAD_S + first
        total.compute_s += compute
        total.memory_s += memory
        total.vector_s += vector
        total.prologue_s += first
        total.steps += steps
        total.hbm_bytes += traffic
        total.mxu_flops += flops
        total.vreg_ops += work.vreg_ops
        total.kernels.append(pallas_grid.kernel_name(eqn))
    total.seconds = max(DISPATCH_FLOOR_S, total.kernel_s)
    if total.mxu_flops:
        total.mxu_utilisation = weighted_util / total.mxu_flops
    return total


def _tables(gm: Any, operands: list[Any] | None, steps: int) -> list[Any] | None:
    """The scalar-prefetch tables' values where the trace fixed all of them and the grid is
    small enough to walk (MAX_WALKED_STEPS), else None."""
    k = gm.num_index_operands
    if not k or operands is None or any(v is None for v in operands[:k]) or gm.num_dynamic_grid_bounds:
        return None
    return list(operands[:k]) if steps <= MAX_WALKED_STEPS else None


def _copies(bm: Any, grid: tuple[int, ...], tables: list[Any]) -> int:
    """How many times a block is copied in (or written back) over the grid, walked in order: once
    at the first step and again at each step whose block index differs from the step before's,
    as Pallas' pipeline skips a copy whose block has not moved. An index map that reads a step
    table (attention's causal walk) moves its block only where the table's entry changes, not
    at every step the table is indexed by."""
    idx = pallas_grid.block_indices(bm, pallas_grid.grid_points(grid), tables)
    return 1 + int(np.any(idx[1:] != idx[:-1], axis=1).sum()) if len(idx) else 0


def _in_vmem(bm: Any) -> bool:
    space = str(getattr(bm.block_aval, "memory_space", "")).lower()
    return not any(s in space for s in ("smem", "semaphore"))


def _block_bytes(bm: Any) -> float | None:
    dims = pallas_grid.block_dims(bm)
    if dims is None:
        return None
    return float(math.prod(dims[0]) * np.dtype(bm.array_aval.dtype).itemsize)


def _array_bytes(bm: Any) -> float:
    return float(math.prod(int(d) for d in bm.array_aval.shape) * np.dtype(bm.array_aval.dtype).itemsize)


def _peak(chip: ChipFigures, dtype: Any, precision: str = "HIGHEST") -> float:
    """The MXU rate of a dot of `dtype` operands traced at `precision`: float32 at "HIGHEST"
    is FLOAT32_MXU_FRACTION of the bf16 rate, at "HIGH" three bf16 passes, at "DEFAULT" one."""
    d = np.dtype(dtype)
    if d.kind in "iu" and d.itemsize == 1:
        return chip.int8_flops
    if d.itemsize >= 4 and precision == "HIGHEST":
        return chip.bf16_flops * FLOAT32_MXU_FRACTION
    if d.itemsize >= 4 and precision == "HIGH":
        return chip.bf16_flops / 3
    return chip.bf16_flops
