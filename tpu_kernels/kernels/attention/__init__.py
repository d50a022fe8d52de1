"""Attention: torch.ops.tpu_kernels.attention(q, k, v, *, causal=False, scale=None,
window=None, block_q=None, block_k=None), flash forward and backward kernels.

q is [batch, heads, seq_q, head_dim]; k and v are [batch, kv_heads, seq_k, head_dim] with
kv_heads dividing heads (grouped-query and multi-query attention, read in place). The op
returns (out, lse); calling `attention(q, k, v)` returns out alone, and lse (each row's
log-sum-exp) is the residual of the backward kernels, registered as
torch.ops.tpu_kernels.attention_backward. A call on TPU tensors that needs no gradient runs
`pallas.attention_out`, the forward without lse. `scaled_dot_product_attention` takes
`torch.nn.functional.scaled_dot_product_attention`'s arguments.
"""

from __future__ import annotations

import jax
import torch

from tpu_kernels.errors import InvalidArgumentError
from tpu_kernels.kernels import registry
from tpu_kernels.kernels.attention import pallas, reference, shapes
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


def _sharding_examples():
    """Concrete calls the sharding simulation runs the rule at (tests/test_sharding_sim.py):
    grouped heads that split evenly over 2 and 3 shards, MQA, and one head per kv head."""

    def call(h, hk, causal, **kw):
        gen = torch.Generator().manual_seed(h * 10 + hk)
        q = torch.randn(3, h, 40, 16, generator=gen)
        kv = [torch.randn(3, hk, 40, 16, generator=gen) for _ in range(2)]
        return (q, *kv), {"causal": causal, **kw}

    return [call(12, 6, True), call(4, 1, True, window=9), call(6, 6, False)]


# Under torch.autocast it casts like torch's scaled_dot_product_attention: q, k and v to the
# autocast dtype.
attention = tpu_kernel(
    "tpu_kernels::attention",
    outputs=("out", "lse"),
    residuals=("lse",),
    visible_kernel=pallas.attention_out,  # a call needing no gradient: no lse output
    examples=_examples,
    autocast="lower_precision_fp",
    sharding=attention_sharding,
    sharding_examples=_sharding_examples,
    check_reference=with_ignored(reference.CHECK, "block_q", "block_k"),
    tune=pallas.Config.space(),
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

SDPA = "scaled_dot_product_attention"


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    window: int | None = None,
) -> torch.Tensor:
    """torch's SDPA on [batch, heads, seq, head_dim] tensors through the attention op:
    `is_causal`, `scale` and grouped kv heads (`enable_gqa=True`, as torch asks) as torch takes
    them, and a sliding `window` (keyword only; needs is_causal). An explicit `attn_mask` and
    dropout are refused, not ignored."""
    if attn_mask is not None:
        raise InvalidArgumentError(
            f"{SDPA}: argument 'attn_mask' must be None; tpu_kernels' attention takes its mask as "
            "is_causal=True and window=, not as a tensor."
        )
    if dropout_p:
        raise InvalidArgumentError(f"{SDPA}: argument 'dropout_p' must be 0.0 (no dropout), got {dropout_p}.")
    if query.dim() != 4:  # torch's SDPA also takes [heads, seq, head_dim] and batchless shapes
        raise InvalidArgumentError(
            f"{SDPA}: argument 'query' must be 4-D [batch, heads, seq, head_dim], got shape {tuple(query.shape)}."
        )
    if key.dim() == 4 and key.shape[1] != query.shape[1] and not enable_gqa:
        raise InvalidArgumentError(
            f"{SDPA}: key has {key.shape[1]} heads and query {query.shape[1]}: pass enable_gqa=True for "
            "grouped-query attention, as torch's scaled_dot_product_attention asks."
        )
    return attention(query, key, value, causal=is_causal, scale=scale, window=window)


__all__ = ["attention", "scaled_dot_product_attention"]
