"""Gated linear unit: torch.ops.tokamax.gated_linear_unit (SwiGLU, GEGLU, ReGLU, GLU) (see `op.py`)."""

from tpu_kernels.tokamax.glu import examples, reference, shapes
from tpu_kernels.tokamax.glu.op import (
    IMPLEMENTATIONS,
    gated_linear_unit,
    gated_linear_unit_op,
)
from tpu_kernels.tokamax.registry import Family, register

FAMILY = register(
    Family(
        "glu",
        functions=(gated_linear_unit,),
        ops=(gated_linear_unit_op,),
        implementations=IMPLEMENTATIONS,
        reference=reference,
        examples=examples,
        shapes=shapes,
    )
)

__all__ = ["FAMILY", "gated_linear_unit", "gated_linear_unit_op"]
