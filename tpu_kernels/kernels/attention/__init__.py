"""Attention: torch.ops.tpu_kernels.attention(q, k, v, *, causal=False, scale=None,
window=None, block_q=None, block_k=None), flash forward and backward kernels.

q is [batch, heads, seq_q, head_dim]; k and v are [batch, kv_heads, seq_k, head_dim] with
kv_heads dividing heads (grouped-query and multi-query attention, read in place). The op
returns (out, lse); calling `attention(q, k, v)` returns out alone, and lse (each row's
log-sum-exp) is the residual of the backward kernels, registered as
torch.ops.tpu_kernels.attention_backward. `scaled_dot_product_attention` takes
`torch.nn.functional.scaled_dot_product_attention`'s arguments.
"""

from __future__ import annotations

import jax

from tpu_kernels.kernels import registry
from tpu_kernels.kernels.attention import pallas, reference, shapes
from tpu_kernels.kernels.attention.sdpa import scaled_dot_product_attention
from tpu_kernels.kernels.attention.sharding import attention_sharding
from tpu_kernels.op import tpu_kernel
from tpu_kernels.verification.tolerance import with_ignored


def _examples():
    """`tpu-kernels check`'s calls: the benchmark shapes in bfloat16, causal, with a window, and not."""
    calls = []
    for b, h, hk, sq, sk, d in shapes.BENCH.values():
        q = jax.ShapeDtypeStruct((b, h, sq, d), "bfloat16")
        kv = jax.ShapeDtypeStruct((b, hk, sk, d), "bfloat16")
        calls += [((q, kv, kv), kw) for kw in ({}, {"causal": True}, {"causal": True, "window": 1024})]
    return calls


# Under torch.autocast it casts like torch's scaled_dot_product_attention: q, k and v to the
# autocast dtype.
attention = tpu_kernel(
    "tpu_kernels::attention",
    outputs=("out", "lse"),
    residuals=("lse",),
    examples=_examples,
    autocast="lower_precision_fp",
    sharding=attention_sharding,
    check_reference=with_ignored(reference.CHECK, "block_q", "block_k"),
    tune=pallas.TUNE,
)(pallas.attention)
attention.def_backward(pallas.attention_backward)


def _flops(shape) -> float:
    """Forward matmul flops (q k^T and p v), the causal half: the family's calls are causal."""
    b, h, _, sq, sk, d = shape
    return 4 * b * h * sq * sk * d / 2


# Every test and benchmark call is causal, as a decoder's; the family's tests add the rest.
registry.register(
    __name__,
    op=attention,
    inputs=lambda shape, dtype, device: (
        registry.randn((shape[0], shape[1], shape[3], shape[5]), dtype, device),
        registry.randn((shape[0], shape[2], shape[4], shape[5]), dtype, device),
        registry.randn((shape[0], shape[2], shape[4], shape[5]), dtype, device),
    ),
    kwargs={"causal": True},
    reduction=lambda shape: max(shape[4], shape[5]),  # head_dim-long scores, seq_k-long sums
    flops=_flops,
)

__all__ = ["attention", "scaled_dot_product_attention"]
