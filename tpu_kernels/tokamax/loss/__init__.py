"""Fused LM-head loss: torch.ops.tokamax.linear_softmax_cross_entropy_loss (see `op.py`)."""

from tpu_kernels.tokamax.loss import examples, reference, shapes
from tpu_kernels.tokamax.loss.op import (
    IMPLEMENTATIONS,
    linear_softmax_cross_entropy_loss,
    linear_softmax_cross_entropy_loss_op,
)
from tpu_kernels.tokamax.registry import Family, register

FAMILY = register(
    Family(
        "loss",
        functions=(linear_softmax_cross_entropy_loss,),
        ops=(linear_softmax_cross_entropy_loss_op,),
        implementations=IMPLEMENTATIONS,
        reference=reference,
        examples=examples,
        shapes=shapes,
    )
)

__all__ = ["FAMILY", "linear_softmax_cross_entropy_loss", "linear_softmax_cross_entropy_loss_op"]
