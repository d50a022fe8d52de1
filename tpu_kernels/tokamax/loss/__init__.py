"""Fused LM-head loss: torch.ops.tokamax.linear_softmax_cross_entropy_loss (see `op.py`)."""

from tpu_kernels.tokamax.loss.op import (
    linear_softmax_cross_entropy_loss,
    linear_softmax_cross_entropy_loss_op,
)
from tpu_kernels.tokamax.registry import register

FAMILY = register(
    __name__, functions=[linear_softmax_cross_entropy_loss], ops=[linear_softmax_cross_entropy_loss_op]
)

__all__ = ["FAMILY", "linear_softmax_cross_entropy_loss", "linear_softmax_cross_entropy_loss_op"]
