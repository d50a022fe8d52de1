"""DeepSeek-V4's RoPE: torch.ops.tokamax.deepseek_rope (see `op.py`)."""

from tpu_kernels.tokamax.registry import register
from tpu_kernels.tokamax.rope.op import deepseek_rope, deepseek_rope_op

FAMILY = register(__name__, functions=[deepseek_rope], ops=[deepseek_rope_op])

__all__ = ["FAMILY", "deepseek_rope", "deepseek_rope_op"]
