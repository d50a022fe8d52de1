"""Grouped matmul: torch.ops.tokamax.ragged_dot and ragged_dot_general (see `op.py`)."""

from tpu_kernels.tokamax.ragged import examples, reference, shapes
from tpu_kernels.tokamax.ragged.op import (
    IMPLEMENTATIONS,
    ragged_dot,
    ragged_dot_general,
    ragged_dot_general_op,
    ragged_dot_op,
)
from tpu_kernels.tokamax.registry import Family, register

FAMILY = register(
    Family(
        "ragged",
        functions=(
            ragged_dot,
            ragged_dot_general,
        ),
        ops=(
            ragged_dot_op,
            ragged_dot_general_op,
        ),
        implementations=IMPLEMENTATIONS,
        reference=reference,
        examples=examples,
        shapes=shapes,
    )
)

__all__ = ["FAMILY", "ragged_dot", "ragged_dot_general", "ragged_dot_general_op", "ragged_dot_op"]
