"""MoE routing: torch.ops.tokamax.top_k and router_topk (see `op.py`)."""

from tpu_kernels.tokamax.registry import register
from tpu_kernels.tokamax.topk.op import router_topk, router_topk_op, top_k, top_k_op

FAMILY = register(__name__, functions=[top_k, router_topk], ops=[top_k_op, router_topk_op])

__all__ = ["FAMILY", "router_topk", "router_topk_op", "top_k", "top_k_op"]
