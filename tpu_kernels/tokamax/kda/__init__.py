"""Kimi delta attention: torch.ops.tokamax.kimi_delta_attention (see `op.py`)."""

from tpu_kernels.tokamax.kda.op import kimi_delta_attention, kimi_delta_attention_op
from tpu_kernels.tokamax.registry import register

FAMILY = register(__name__, functions=[kimi_delta_attention], ops=[kimi_delta_attention_op])

__all__ = ["FAMILY", "kimi_delta_attention", "kimi_delta_attention_op"]
