"""`torch.nn.functional.scaled_dot_product_attention`'s call shape over the attention op."""

from __future__ import annotations

import torch

from tpu_kernels.errors import InvalidArgumentError

OP = "scaled_dot_product_attention"


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
    """torch's SDPA on [batch, heads, seq, head_dim] tensors through tpu_kernels' attention:
    `is_causal`, `scale` and grouped kv heads (`enable_gqa=True`, as torch asks) as torch
    takes them, and a sliding `window` (keyword only; needs is_causal). An explicit
    `attn_mask` and dropout are refused, not ignored."""
    if attn_mask is not None:
        raise InvalidArgumentError(
            f"{OP}: argument 'attn_mask' must be None; tpu_kernels' attention takes its mask as "
            "is_causal=True and window=, not as a tensor."
        )
    if dropout_p:
        raise InvalidArgumentError(f"{OP}: argument 'dropout_p' must be 0.0 (no dropout), got {dropout_p}.")
    if query.dim() != 4:  # torch's SDPA also takes [heads, seq, head_dim] and batchless shapes
        raise InvalidArgumentError(
            f"{OP}: argument 'query' must be 4-D [batch, heads, seq, head_dim], got shape {tuple(query.shape)}."
        )
    if key.shape[1] != query.shape[1] and not enable_gqa:
        raise InvalidArgumentError(
            f"{OP}: key has {key.shape[1]} heads and query {query.shape[1]}: pass enable_gqa=True for "
            "grouped-query attention, as torch's scaled_dot_product_attention asks."
        )
    from tpu_kernels.kernels.attention import attention

    return attention(query, key, value, causal=is_causal, scale=scale, window=window)
