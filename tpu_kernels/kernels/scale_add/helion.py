"""The Helion twin of scale_add as a torch op (importing this module imports Helion):
`tpu_kernels::add_helion(x, y, alpha=1.0)`, 2-D with broadcasting; backward derived
(`jax.vjp` of the JAX reference below)."""

import jax
import jax.numpy as jnp

from tpu_kernels.dispatch.buckets import bucket_rows
from tpu_kernels.kernels._blocks import bf16 as _bf16
from tpu_kernels.kernels.scale_add import helion_kernel, reference
from tpu_kernels.op import tpu_kernel


def _add_reference(x: jax.Array, y: jax.Array, alpha: float = 1.0) -> jax.Array:
    dtype = jnp.result_type(x, y)
    acc = jnp.promote_types(dtype, jnp.float32)
    return (x.astype(acc) + alpha * y.astype(acc)).astype(dtype)


# Example calls for the TPU lowering check (`tpu-kernels check`), TPU-sized, bfloat16.
_X = _bf16((1024, 1024))

add_helion = tpu_kernel(
    "tpu_kernels::add_helion",
    float_only=("x", "y"),  # the shipped ops' integer rule (docs/dtypes.md): the same error
    reference=_add_reference,
    check_reference=reference.CHECK,  # scale_add's: x + alpha * y
    sharding="pointwise",
    examples=lambda: [((_X, _bf16((1, 1024))), {"alpha": 0.5})],
    autocast="keep",
    # rows padded to buckets (a broadcast row stays one): a whole number of the kernel's 8-row
    # tiles; its 128-wide column tiles still need at most 128 columns or a multiple of 128
    buckets=bucket_rows("x", "y", "out"),
)(helion_kernel.add)
__all__ = ["add_helion"]
