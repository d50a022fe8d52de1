"""Triangle multiplication (AlphaFold 2): torch.ops.tokamax.triangle_multiplication (see `op.py`)."""

from tpu_kernels.tokamax.registry import Family, register
from tpu_kernels.tokamax.triangle import examples, reference, shapes
from tpu_kernels.tokamax.triangle.op import (
    IMPLEMENTATIONS,
    triangle_multiplication,
    triangle_multiplication_op,
)

FAMILY = register(
    Family(
        "triangle",
        functions=(triangle_multiplication,),
        ops=(triangle_multiplication_op,),
        implementations=IMPLEMENTATIONS,
        reference=reference,
        examples=examples,
        shapes=shapes,
    )
)

__all__ = ["FAMILY", "triangle_multiplication", "triangle_multiplication_op"]
