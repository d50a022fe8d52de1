"""Grouped matmul: torch.ops.tokamax.ragged_dot and ragged_dot_general (see `op.py`)."""

from tpu_kernels.tokamax.ragged.op import ragged_dot, ragged_dot_general, ragged_dot_general_op, ragged_dot_op
from tpu_kernels.tokamax.registry import register

FAMILY = register(
    __name__, functions=[ragged_dot, ragged_dot_general], ops=[ragged_dot_op, ragged_dot_general_op]
)

__all__ = ["FAMILY", "ragged_dot", "ragged_dot_general", "ragged_dot_general_op", "ragged_dot_op"]
