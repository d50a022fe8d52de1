"""RMSNorm: torch.ops.tpu_kernels.rmsnorm(x, weight, *, eps=1e-6, block_rows=256).

The op returns (y, inv_rms); calling `rmsnorm(x, w)` returns y alone, and
inv_rms is kept as a residual for the explicit backward kernel
(torch.ops.tpu_kernels.rmsnorm_backward).
"""

from tpu_kernels.kernels.rmsnorm import pallas
from tpu_kernels.op import tpu_kernel

rmsnorm = tpu_kernel("tpu_kernels::rmsnorm", outputs=("y", "inv_rms"), residuals=("inv_rms",))(pallas.rmsnorm)
rmsnorm.def_backward(pallas.rmsnorm_backward)

__all__ = ["rmsnorm"]
