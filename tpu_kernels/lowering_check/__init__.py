"""The TPU lowering check: does each op compile for the TPU, on a machine without one?

    from tpu_kernels.lowering_check import check_op
    report = check_op(my_op)            # every example call of the op, lowered for "tpu"
    assert report.status == "ok", report

- `explain.py`: common Mosaic/Pallas lowering errors in plain words.
- `vmem.py`: VMEM per grid step of each Pallas kernel, from its traced jaxpr.
- `coverage.py`: output elements no grid step writes, blocks entirely outside their array.
- `examples.py`: the op's example calls (derived for backward ops).
- `races.py`: the TPU-semantics interpreter with its race detector.
- `lowering.py`: `check_op`, the per-op report.
- `modules.py`: the ops a module defines (for `tpu-kernels check MODULE`).

It builds on the core's `tpu_kernels.lowering.target` (TPU generations: the lowering's target and
its VMEM) and `tpu_kernels.lowering.export` (`jax.export` of a kernel for platform "tpu", Pallas ->
Mosaic, which `KernelOp.lower` uses too); the core never imports this package.

See docs/tpu-lowering-check.md.
"""

from tpu_kernels.lowering.export import export_kernel
from tpu_kernels.lowering.target import DEFAULT_CHIP, Chip, chip
from tpu_kernels.lowering_check.explain import Explanation, explain
from tpu_kernels.lowering_check.lowering import ExampleResult, OpReport, check_call, check_op
from tpu_kernels.lowering_check.modules import DEFAULT_MODULE, ops_of
from tpu_kernels.lowering_check.vmem import KernelFootprint, kernel_footprints

__all__ = [
    "DEFAULT_CHIP",
    "DEFAULT_MODULE",
    "Chip",
    "ExampleResult",
    "Explanation",
    "KernelFootprint",
    "OpReport",
    "check_call",
    "check_op",
    "chip",
    "explain",
    "export_kernel",
    "kernel_footprints",
    "ops_of",
]
