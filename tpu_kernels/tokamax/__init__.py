"""Tokamax's ops as torch ops: torch.ops.tokamax.<name>, with gradients, fakes and compile support.

Each function here takes torch tensors in Tokamax's layouts, chooses a Tokamax
implementation by the tensors' device unless `implementation=` says otherwise
(`resolve_implementation`), and calls the registered op. docs/tokamax.md lists
every op with its signature, layouts, devices and implementations.

    from tpu_kernels import tokamax as tk
    out = tk.dot_product_attention(q, k, v, is_causal=True)   # q: [batch, seq, heads, head_dim]

One folder per op family (`attention/`, `normalization/`, ...; named after
Tokamax's `_src/ops/<family>/`), each with its ops, reference, TPU examples and
shapes; importing a family registers it in `FAMILIES` (see `registry.py`).
"""

# Importing a family registers its ops and implementation tables (FAMILIES and
# implementation.OPS follow this, alphabetical, order).
from tpu_kernels.tokamax.attention import dot_product_attention, scaled_dot_product_attention
from tpu_kernels.tokamax.gather import ragged_gather, ragged_gather_reduce
from tpu_kernels.tokamax.glu import gated_linear_unit
from tpu_kernels.tokamax.implementation import (
    ImplementationError,
    implementations,
    resolve_implementation,
)
from tpu_kernels.tokamax.kda import kimi_delta_attention
from tpu_kernels.tokamax.loss import linear_softmax_cross_entropy_loss
from tpu_kernels.tokamax.mhc import mhc_fused_post_pre, mhc_post, mhc_pre
from tpu_kernels.tokamax.normalization import layer_norm, rms_norm
from tpu_kernels.tokamax.ragged import ragged_dot, ragged_dot_general
from tpu_kernels.tokamax.registry import FAMILIES, Family
from tpu_kernels.tokamax.rope import deepseek_rope
from tpu_kernels.tokamax.topk import router_topk, top_k
from tpu_kernels.tokamax.triangle import triangle_multiplication
from tpu_kernels.tokamax.wrap import tokamax_op

__all__ = [
    "FAMILIES",
    "Family",
    "ImplementationError",
    "deepseek_rope",
    "dot_product_attention",
    "gated_linear_unit",
    "implementations",
    "kimi_delta_attention",
    "layer_norm",
    "linear_softmax_cross_entropy_loss",
    "mhc_fused_post_pre",
    "mhc_post",
    "mhc_pre",
    "ragged_dot",
    "ragged_dot_general",
    "ragged_gather",
    "ragged_gather_reduce",
    "resolve_implementation",
    "rms_norm",
    "router_topk",
    "scaled_dot_product_attention",
    "tokamax_op",
    "top_k",
    "triangle_multiplication",
]
