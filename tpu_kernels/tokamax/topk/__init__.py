"""MoE routing: torch.ops.tokamax.top_k and router_topk (see `op.py`)."""

from tpu_kernels.tokamax.registry import Family, register
from tpu_kernels.tokamax.topk import examples, reference, shapes
from tpu_kernels.tokamax.topk.op import (
    IMPLEMENTATIONS,
    router_topk,
    router_topk_op,
    top_k,
    top_k_op,
)

FAMILY = register(
    Family(
        "topk",
        functions=(
            top_k,
            router_topk,
        ),
        ops=(
            top_k_op,
            router_topk_op,
        ),
        implementations=IMPLEMENTATIONS,
        reference=reference,
        examples=examples,
        shapes=shapes,
    )
)

__all__ = ["FAMILY", "router_topk", "router_topk_op", "top_k", "top_k_op"]
