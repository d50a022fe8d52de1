"""MoE dispatch and combine: torch.ops.tokamax.ragged_gather and ragged_gather_reduce (see `op.py`)."""

from tpu_kernels.tokamax.gather.op import (
    ragged_gather,
    ragged_gather_op,
    ragged_gather_reduce,
    ragged_gather_reduce_op,
)
from tpu_kernels.tokamax.registry import register

FAMILY = register(
    __name__, functions=[ragged_gather, ragged_gather_reduce], ops=[ragged_gather_op, ragged_gather_reduce_op]
)

__all__ = ["FAMILY", "ragged_gather", "ragged_gather_op", "ragged_gather_reduce", "ragged_gather_reduce_op"]
