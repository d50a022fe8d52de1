"""MoE dispatch and combine: torch.ops.tokamax.ragged_gather and ragged_gather_reduce (see `op.py`)."""

from tpu_kernels.tokamax.gather import examples, reference, shapes
from tpu_kernels.tokamax.gather.op import (
    IMPLEMENTATIONS,
    ragged_gather,
    ragged_gather_op,
    ragged_gather_reduce,
    ragged_gather_reduce_op,
)
from tpu_kernels.tokamax.registry import Family, register

FAMILY = register(
    Family(
        "gather",
        functions=(
            ragged_gather,
            ragged_gather_reduce,
        ),
        ops=(
            ragged_gather_op,
            ragged_gather_reduce_op,
        ),
        implementations=IMPLEMENTATIONS,
        reference=reference,
        examples=examples,
        shapes=shapes,
    )
)

__all__ = ["FAMILY", "ragged_gather", "ragged_gather_op", "ragged_gather_reduce", "ragged_gather_reduce_op"]
