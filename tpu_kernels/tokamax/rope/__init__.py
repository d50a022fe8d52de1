"""DeepSeek-V4's RoPE: torch.ops.tokamax.deepseek_rope (see `op.py`)."""

from tpu_kernels.tokamax.registry import Family, register
from tpu_kernels.tokamax.rope import examples, reference, shapes
from tpu_kernels.tokamax.rope.op import (
    IMPLEMENTATIONS,
    deepseek_rope,
    deepseek_rope_op,
)

FAMILY = register(
    Family(
        "rope",
        functions=(deepseek_rope,),
        ops=(deepseek_rope_op,),
        implementations=IMPLEMENTATIONS,
        reference=reference,
        examples=examples,
        shapes=shapes,
    )
)

__all__ = ["FAMILY", "deepseek_rope", "deepseek_rope_op"]
