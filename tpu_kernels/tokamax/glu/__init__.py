"""Gated linear unit: torch.ops.tokamax.gated_linear_unit (SwiGLU, GEGLU, ReGLU, GLU) (see `op.py`)."""

from tpu_kernels.tokamax.glu.op import gated_linear_unit, gated_linear_unit_op
from tpu_kernels.tokamax.registry import register

FAMILY = register(__name__, functions=[gated_linear_unit], ops=[gated_linear_unit_op])

__all__ = ["FAMILY", "gated_linear_unit", "gated_linear_unit_op"]
