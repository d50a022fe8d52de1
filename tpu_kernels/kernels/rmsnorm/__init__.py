"""RMSNorm: torch.ops.tpu_kernels.rmsnorm(x, weight, *, eps=1e-6, block_rows=256).

The op returns (y, inv_rms); calling `rmsnorm(x, w)` returns y alone, and
inv_rms is kept as a residual for the explicit backward kernel
(torch.ops.tpu_kernels.rmsnorm_backward).
"""

from tpu_kernels.kernels._blocks import bf16 as _bf16
from tpu_kernels.kernels.rmsnorm import pallas, shapes
from tpu_kernels.op import tpu_kernel


def _examples():
    return [((_bf16(shape), _bf16(shape[-1:])), {}) for shape in shapes.BENCH.values()]


# Under torch.autocast it runs in float32 (statistics and output), like CUDA autocast's norms.
rmsnorm = tpu_kernel(
    "tpu_kernels::rmsnorm",
    outputs=("y", "inv_rms"),
    residuals=("inv_rms",),
    examples=_examples,
    autocast="fp32",
    sharding="rowwise",
)(pallas.rmsnorm)
rmsnorm.def_backward(pallas.rmsnorm_backward)

__all__ = ["rmsnorm"]
