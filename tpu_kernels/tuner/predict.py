"""A TPU chip's ranking of candidate configs without the chip: the TPU check prunes, a cost
model ranks the rest. Every figure this module gives is *predicted*, never measured.

Pruning: each candidate is lowered for the target chip (`check.lowering.check_call`: Mosaic's
lowering through `jax.export`, block shapes and tiling, the VMEM a grid step needs against the
chip's scoped limit, grid coverage and dimension semantics). A candidate with any problem is
pruned, with the check's explanation; it is never run.

The cost model, per `pallas_call` of the traced kernel (summed over the kernel's calls):

    time = max(compute, memory) + steps * STEP_OVERHEAD_S + prologue

- memory: the HBM bytes the pipeline moves, over the chip's HBM bandwidth times HBM_EFFICIENCY. A block is copied
  in (or written back) whenever its block index changes between consecutive grid steps
  (row-major order, the last axis fastest), so an operand whose index map reads only the
  outer axes is fetched once per outer step: `prod(grid[:a+1])` copies, `a` the innermost
  grid axis of size > 1 that its index map reads (one copy when it reads none). Operands left
  in HBM (`memory_space=pl.ANY`) count their whole array once.
- compute: the kernel body's `dot_general`s, 2*M*N*K flops each per grid step, at the chip's
  peak MXU rate for the operands' dtype (bfloat16/float16 at the bf16 peak, int8 at the int8
  peak, float32 at FLOAT32_MXU_FRACTION of the bf16 peak: a multi-pass bf16 product), times
  MXU_EFFICIENCY and the MXU's utilisation: M and N below the MXU's width (`mxu_column_size`: 128 on v5e, 256 on v6e and
  7x) fill that fraction of it. Vector (VPU) work is not modelled: kernels without a dot are
  taken to be memory-bound.
- steps * STEP_OVERHEAD_S: a fixed cost per grid step (DMA issue and synchronisation, loop
  control), fitted to a v5e's row sweeps (below).
- prologue: the first step's input blocks, which no compute hides.

The chip's figures (peak rates, HBM bandwidth, MXU width) are JAX's, `pltpu.get_tpu_info_for_chip`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tpu_kernels.lowering import pallas_grid

# Fitted to a TPU v5e's tuning sweeps (bench/reports/chip_v5e_tune.json, commit 4a855dd) by
# bench/chip_tuning.py, record bench/reports/chip_v5e_tuning_fit.json: least squares in log time.
# STEP_OVERHEAD_S and HBM_EFFICIENCY from the row sweeps (rmsnorm bf16[8192, 4096] and softmax
# f32[4096, 4096], 8-256 rows a block: fixed bytes, 32 to 1024 steps): rms log error 0.061
# (0.125 at the 0.35 us and full bandwidth assumed before). MXU_EFFICIENCY from the matmul sweeps
# (123 compiled configs at 4 shapes): 0.125 (0.175 before). FLOAT32_MXU_FRACTION from
# bench/reports/chip_v5e.json: bf16 4096^3 in 0.745 ms, float32 at "highest" in 4.27 ms.
# The fit lowers the residuals but not the choices: at 2048^3 the smaller step overhead lets the
# model pick block_k=256 configs the chip runs 9-21% slower (a cost per k-step that grows with the
# block, which no constant here models; the record's table in docs/autotuning.md, "Against a TPU
# v5e"). The shipped measured v5e matmul table, not this model, decides at the record's shapes.
STEP_OVERHEAD_S = 0.23e-6
"""Seconds per grid step beyond the step's data movement and compute (fitted, see above)."""

FLOAT32_MXU_FRACTION = 0.175
"""float32 dots (at "highest", torch's default precision) run at this fraction of the bf16 rate:
about six bf16 passes on a v5e, not the three assumed before (fitted, see above)."""

MXU_EFFICIENCY = 0.85
"""The share of the MXU's peak rate a kernel's dots reach at full utilisation (fitted)."""

HBM_EFFICIENCY = 0.87
"""The share of the chip's HBM bandwidth the pipeline's copies reach (fitted)."""

FITTED = ("STEP_OVERHEAD_S", "FLOAT32_MXU_FRACTION", "MXU_EFFICIENCY", "HBM_EFFICIENCY")
"""The constants bench/chip_tuning.py fits to a chip's records (bench/reports/chip_v5e_tuning_fit.json)."""

MODEL = (
    "roofline per pallas_call: max(MXU flops / peak * utilisation, pipelined HBM bytes / bandwidth) "
    f"+ {STEP_OVERHEAD_S * 1e6:g} us per grid step + the first step's input blocks"
)


@dataclass(frozen=True)
class ChipFigures:
    name: str
    bf16_flops: float
    int8_flops: float
    hbm_bytes_per_s: float
    mxu_width: int

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
        )


@dataclass
class Prediction:
    """One candidate's predicted time on one chip, and its parts."""

    seconds: float
    compute_s: float = 0.0
    memory_s: float = 0.0
    prologue_s: float = 0.0
    steps: int = 0
    hbm_bytes: float = 0.0
    mxu_flops: float = 0.0
    mxu_utilisation: float | None = None
    kernels: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "predicted_s": self.seconds,
            "compute_s": self.compute_s,
            "memory_s": self.memory_s,
            "prologue_s": self.prologue_s,
            "grid_steps": self.steps,
            "hbm_bytes": self.hbm_bytes,
            "mxu_flops": self.mxu_flops,
            "mxu_utilisation": self.mxu_utilisation,
        }


def predict(eqns: list[Any], chip: ChipFigures) -> Prediction:
    """The cost model over the `pallas_call` equations of one traced call."""
    total = Prediction(0.0)
    weighted_util = 0.0
    for eqn in eqns:
        gm = eqn.params["grid_mapping"]
        grid = tuple(int(g) for g in gm.grid)
        steps = math.prod(grid) if grid else 1
        traffic, prologue = 0.0, 0.0
        for i, bm in enumerate(gm.block_mappings):
            nbytes = _block_bytes(bm)
            if pallas_grid.in_hbm(bm):
                traffic += _array_bytes(bm)
                continue
            if nbytes is None or not _in_vmem(bm):
                continue
            moving = [a for a in pallas_grid.moving_axes(bm, len(grid)) if grid[a] > 1]
            copies = math.prod(grid[: max(moving) + 1]) if moving else 1
            traffic += copies * nbytes
            if i < gm.num_inputs:
                prologue += nbytes
        compute, flops, util = 0.0, 0.0, []
        for m, n, k, batch, dtype in _dots(eqn.params["jaxpr"]):
            f = 2.0 * m * n * k * batch * steps
            u = min(1.0, m / chip.mxu_width) * min(1.0, n / chip.mxu_width)
            compute += f / (_peak(chip, dtype) * u * MXU_EFFICIENCY)
            flops += f
            util.append((f, u))
        memory = traffic / (chip.hbm_bytes_per_s * HBM_EFFICIENCY)
        first = prologue / (chip.hbm_bytes_per_s * HBM_EFFICIENCY)
        total.seconds += max(compute, memory) + steps * STEP_OVERHEAD_S + first
        total.compute_s += compute
        total.memory_s += memory
        total.prologue_s += first
        total.steps += steps
        total.hbm_bytes += traffic
        total.mxu_flops += flops
        weighted_util += sum(f * u for f, u in util)
        total.kernels.append(pallas_grid.kernel_name(eqn))
    if total.mxu_flops:
        total.mxu_utilisation = weighted_util / total.mxu_flops
    return total


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


def _peak(chip: ChipFigures, dtype: Any) -> float:
    d = np.dtype(dtype)
    if d.kind in "iu" and d.itemsize == 1:
        return chip.int8_flops
    if d.itemsize >= 4:
        return chip.bf16_flops * FLOAT32_MXU_FRACTION
    return chip.bf16_flops


def _dots(jaxpr: Any) -> list[tuple[int, int, int, int, Any]]:
    """(M, N, K, batch, operand dtype) of every dot_general in a kernel body, nested ones too."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    out = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            lhs, rhs = (v.aval for v in eqn.invars[:2])
            (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
            batch = math.prod(int(lhs.shape[d]) for d in lb) if lb else 1
            k = math.prod(int(lhs.shape[d]) for d in lc) if lc else 1
            m = math.prod(int(s) for d, s in enumerate(lhs.shape) if d not in lc and d not in lb)
            n = math.prod(int(s) for d, s in enumerate(rhs.shape) if d not in rc and d not in rb)
            out.append((m, n, k, batch, lhs.dtype))
        for value in eqn.params.values():
            for sub in pallas_grid.sub_jaxprs(value):
                out += _dots(sub)
    return out
