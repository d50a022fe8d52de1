"""Plain-torch references of the attention ops, for tests (in float64) and benchmarks (as baselines).

They take the arguments and layouts of the functions of the same name in
`tpu_kernels.tokamax`: F.scaled_dot_product_attention's semantics, written out
where Tokamax's differ (soft cap, fully masked rows). Differentiable with torch autograd.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def attention_mask(
    t: int,
    s: int,
    *,
    mask: torch.Tensor | None = None,
    is_causal: bool = False,
    query_seq_lengths: torch.Tensor | None = None,
    key_value_seq_lengths: torch.Tensor | None = None,
    local_window_size: int | tuple[int, int] | None = None,
    device: torch.device | str = "cpu",
) -> torch.Tensor | None:
    """Tokamax's combined mask (True = attend), broadcastable to [batch, heads, t, s]; None if all True."""
    q_idx = torch.arange(t, device=device)[:, None]
    k_idx = torch.arange(s, device=device)[None, :]
    allowed = None if mask is None else mask.bool()

    def both(m: torch.Tensor) -> torch.Tensor:
        return m if allowed is None else allowed & m

    if is_causal:
        allowed = both(k_idx <= q_idx)  # top-left aligned, as in F.sdpa
    if local_window_size is not None:
        left, right = (
            (local_window_size, local_window_size)
            if isinstance(local_window_size, int)
            else local_window_size
        )
        allowed = both((k_idx >= q_idx - left) & (k_idx <= q_idx + right))
    if query_seq_lengths is not None:
        allowed = both(q_idx < query_seq_lengths.to(device)[:, None, None, None])
    if key_value_seq_lengths is not None:
        allowed = both(k_idx < key_value_seq_lengths.to(device)[:, None, None, None])
    return allowed


def dot_product_attention(
    query,
    key,
    value,
    bias=None,
    mask=None,
    *,
    scale=None,
    is_causal=False,
    query_seq_lengths=None,
    key_value_seq_lengths=None,
    local_window_size=None,
    logits_soft_cap=None,
) -> torch.Tensor:
    """Attention in Tokamax's [*batch, seq, heads, head_dim] layout, Tokamax's semantics.

    Without a soft cap and with every query row able to attend some key, this is
    F.scaled_dot_product_attention(enable_gqa=True) on transposed inputs (tested).
    Masked logits become the dtype's most negative value (not -inf), so a fully
    masked row is the mean of value and gets no gradient, as in Tokamax.
    """
    q, k, v = (x.transpose(-3, -2) for x in (query, key, value))  # -> [*batch, heads, seq, dim]
    group = q.shape[-3] // k.shape[-3]
    k, v = k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    logits = torch.einsum("...qd,...kd->...qk", q, k) * scale
    if bias is not None:
        logits = logits + bias
    if logits_soft_cap is not None:
        logits = logits_soft_cap * torch.tanh(logits / logits_soft_cap)
    allowed = attention_mask(
        q.shape[-2],
        k.shape[-2],
        mask=mask,
        is_causal=is_causal,
        query_seq_lengths=query_seq_lengths,
        key_value_seq_lengths=key_value_seq_lengths,
        local_window_size=local_window_size,
        device=q.device,
    )
    if allowed is not None:
        logits = torch.where(allowed, logits, torch.finfo(logits.dtype).min)
    out = torch.einsum("...qk,...kd->...qd", torch.softmax(logits, dim=-1), v)
    return out.transpose(-3, -2)


def scaled_dot_product_attention(
    query, key, value, attn_mask=None, is_causal=False, scale=None
) -> torch.Tensor:
    """torch's own, [*batch, heads, seq, head_dim], with GQA."""
    return F.scaled_dot_product_attention(
        query, key, value, attn_mask=attn_mask, is_causal=is_causal, scale=scale, enable_gqa=True
    )


__all__ = ["attention_mask", "dot_product_attention", "scaled_dot_product_attention"]
