"""Attention: torch.ops.tokamax.dot_product_attention, in Tokamax's layout or torch's (see `op.py`)."""

from tpu_kernels.tokamax.attention import examples, reference, shapes
from tpu_kernels.tokamax.attention.op import (
    IMPLEMENTATIONS,
    dot_product_attention,
    dot_product_attention_op,
    scaled_dot_product_attention,
)
from tpu_kernels.tokamax.registry import Family, register

FAMILY = register(
    Family(
        "attention",
        functions=(dot_product_attention, scaled_dot_product_attention),
        ops=(dot_product_attention_op,),
        implementations=IMPLEMENTATIONS,
        reference=reference,
        examples=examples,
        shapes=shapes,
    )
)

__all__ = ["FAMILY", "dot_product_attention", "dot_product_attention_op", "scaled_dot_product_attention"]
