"""Elementwise: torch.ops.tpu_kernels.scale_add(x, y, *, alpha=1.0, block_rows=256).

The backward is derived with jax.vjp from the kernel body, which is a
jax.custom_vjp whose backward runs the same Pallas kernel.
"""

from tpu_kernels.kernels.elementwise import pallas
from tpu_kernels.op import tpu_kernel

scale_add = tpu_kernel("tpu_kernels::scale_add", backward="vjp")(pallas.scale_add)

__all__ = ["scale_add"]
