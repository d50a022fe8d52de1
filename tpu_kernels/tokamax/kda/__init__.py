"""Kimi delta attention: torch.ops.tokamax.kimi_delta_attention (see `op.py`)."""

from tpu_kernels.tokamax.kda import examples, reference, shapes
from tpu_kernels.tokamax.kda.op import (
    IMPLEMENTATIONS,
    kimi_delta_attention,
    kimi_delta_attention_op,
)
from tpu_kernels.tokamax.registry import Family, register

FAMILY = register(
    Family(
        "kda",
        functions=(kimi_delta_attention,),
        ops=(kimi_delta_attention_op,),
        implementations=IMPLEMENTATIONS,
        reference=reference,
        examples=examples,
        shapes=shapes,
    )
)

__all__ = ["FAMILY", "kimi_delta_attention", "kimi_delta_attention_op"]
