"""The Helion twin of matmul as a torch op (importing this module imports Helion):
`tpu_kernels::matmul_helion(a, b)`; backward derived from the family's JAX reference."""

from tpu_kernels.kernels._blocks import bf16 as _bf16
from tpu_kernels.kernels.matmul import helion_kernel, reference
from tpu_kernels.kernels.matmul.sharding import matmul_sharding
from tpu_kernels.op import tpu_kernel

# Example calls for the TPU lowering check (`tpu-kernels check`), TPU-sized, bfloat16.
_X = _bf16((1024, 1024))

matmul_helion = tpu_kernel(
    "tpu_kernels::matmul_helion",
    float_only=("a", "b"),  # the shipped ops' integer rule (docs/dtypes.md): the same error
    reference=reference.matmul_jax,
    check_reference=reference.CHECK,  # the Pallas matmul's: K-long sums, gradients over M and N
    examples=lambda: [((_X, _X), {})],
    autocast="lower_precision_fp",
    sharding=matmul_sharding,
)(helion_kernel.matmul)
__all__ = ["matmul_helion"]
