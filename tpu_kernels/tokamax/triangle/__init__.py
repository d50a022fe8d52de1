"""Triangle multiplication (AlphaFold 2): torch.ops.tokamax.triangle_multiplication (see `op.py`)."""

from tpu_kernels.tokamax.registry import register
from tpu_kernels.tokamax.triangle.op import triangle_multiplication, triangle_multiplication_op

FAMILY = register(__name__, functions=[triangle_multiplication], ops=[triangle_multiplication_op])

__all__ = ["FAMILY", "triangle_multiplication", "triangle_multiplication_op"]
