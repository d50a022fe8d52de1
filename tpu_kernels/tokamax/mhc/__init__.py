"""DeepSeek-V4's hyper-connections: torch.ops.tokamax.mhc_pre, mhc_post, mhc_fused_post_pre (see `op.py`)."""

from tpu_kernels.tokamax.mhc.op import (
    mhc_fused_post_pre,
    mhc_fused_post_pre_op,
    mhc_post,
    mhc_post_op,
    mhc_pre,
    mhc_pre_op,
)
from tpu_kernels.tokamax.registry import register

FAMILY = register(
    __name__,
    functions=[mhc_pre, mhc_post, mhc_fused_post_pre],
    ops=[mhc_pre_op, mhc_post_op, mhc_fused_post_pre_op],
)

__all__ = [
    "FAMILY",
    "mhc_fused_post_pre",
    "mhc_fused_post_pre_op",
    "mhc_post",
    "mhc_post_op",
    "mhc_pre",
    "mhc_pre_op",
]
