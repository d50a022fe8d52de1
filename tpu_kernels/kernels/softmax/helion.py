"""The Helion twin of softmax as a torch op (importing this module imports Helion):
`tpu_kernels::softmax_helion(x)`; backward derived from the family's JAX reference."""

from tpu_kernels.dispatch.buckets import bucket_rows
from tpu_kernels.kernels._blocks import bf16 as _bf16
from tpu_kernels.kernels.softmax import helion_kernel, reference
from tpu_kernels.op import tpu_kernel

# Example calls for the TPU lowering check (`tpu-kernels check`), TPU-sized, bfloat16.
_X = _bf16((1024, 1024))

softmax_helion = tpu_kernel(
    "tpu_kernels::softmax_helion",
    float_only=("x",),  # the shipped ops' integer rule (docs/dtypes.md): the same error
    reference=reference.softmax_jax,
    check_reference=reference.CHECK,
    examples=lambda: [((_X,), {})],
    autocast="fp32",
    sharding="rowwise",
    # rows padded to the Pallas twin's buckets: always a whole number of the kernel's 8-row
    # tiles, which Helion's Pallas backend needs (it runs no partial tile)
    buckets=bucket_rows("x", "out"),
)(helion_kernel.softmax)
__all__ = ["softmax_helion"]
