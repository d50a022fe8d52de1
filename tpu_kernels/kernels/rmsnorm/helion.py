"""The Helion twin of rmsnorm as torch ops (importing this module imports Helion):
`tpu_kernels::rmsnorm_helion(x, weight, eps=1e-6)`, which returns inv_rms as a residual
(a TPU call that needs no gradient runs `helion_kernel.rmsnorm_visible`, without it), and its
explicit backward, two Helion kernels `rmsnorm_helion_dx` and `rmsnorm_helion_dweight`."""

import jax
import jax.numpy as jnp
import torch

from tpu_kernels.dispatch.buckets import bucket_rows
from tpu_kernels.kernels._blocks import bf16 as _bf16
from tpu_kernels.kernels.rmsnorm import helion_kernel, reference
from tpu_kernels.kernels.rmsnorm import sharding as rms_sharding
from tpu_kernels.op import tpu_kernel

# Example calls for the TPU lowering check (`tpu-kernels check`), TPU-sized, bfloat16.
_X, _W = _bf16((1024, 1024)), _bf16((1024,))
_R = jax.ShapeDtypeStruct((1024,), jnp.float32)

rmsnorm_helion = tpu_kernel(
    "tpu_kernels::rmsnorm_helion",
    float_only=("x", "weight"),  # the shipped ops' integer rule (docs/dtypes.md): the same error
    outputs=("y", "inv_rms"),
    residuals=("inv_rms",),
    visible_kernel=helion_kernel.rmsnorm_visible,
    examples=lambda: [((_X, _W), {})],
    autocast="fp32",
    sharding=rms_sharding.rmsnorm_sharding,
    check_reference=reference.CHECK,
    # rows (dim 0 of x, y and the 1-D inv_rms) padded to buckets: a whole number of the kernel's
    # 8-row tiles, which Helion's Pallas backend needs; the backward kernels pad alike (zero
    # rows add nothing to the weight's gradient)
    buckets=bucket_rows("x", "y", "inv_rms", dim=0),
)(helion_kernel.rmsnorm)
rmsnorm_helion_dx = tpu_kernel(
    "tpu_kernels::rmsnorm_helion_dx",
    examples=lambda: [((_X, _W, _R, _X), {})],
    sharding=rms_sharding.dx_sharding,
    check_reference=reference.CHECK_DX,
    buckets=bucket_rows("x", "inv_rms", "grad_y", dim=0),
)(helion_kernel.rmsnorm_dx)
rmsnorm_helion_dweight = tpu_kernel(
    "tpu_kernels::rmsnorm_helion_dweight",
    examples=lambda: [((_X, _R, _X), {})],
    sharding=rms_sharding.dweight_sharding,
    check_reference=reference.CHECK_DWEIGHT,
    buckets=bucket_rows("x", "inv_rms", "grad_y", dim=0),
)(helion_kernel.rmsnorm_dweight)


@rmsnorm_helion.def_backward(composite=True)
def _rmsnorm_helion_backward(
    x: torch.Tensor, weight: torch.Tensor, inv_rms: torch.Tensor, grad_y: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    grad_w = rmsnorm_helion_dweight(x, inv_rms, grad_y).to(weight.dtype)
    return rmsnorm_helion_dx(x, weight, inv_rms, grad_y), grad_w


__all__ = ["rmsnorm_helion", "rmsnorm_helion_dweight", "rmsnorm_helion_dx"]
