"""Attention: torch.ops.tokamax.dot_product_attention, in Tokamax's layout or torch's (see `op.py`)."""

from tpu_kernels.tokamax.attention.op import (
    dot_product_attention,
    dot_product_attention_op,
    scaled_dot_product_attention,
)
from tpu_kernels.tokamax.registry import register

FAMILY = register(
    __name__, functions=[dot_product_attention, scaled_dot_product_attention], ops=[dot_product_attention_op]
)

__all__ = ["FAMILY", "dot_product_attention", "dot_product_attention_op", "scaled_dot_product_attention"]
