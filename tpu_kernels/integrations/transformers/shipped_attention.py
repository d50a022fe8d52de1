"""Hugging Face's attention interface on tpu_kernels' own attention kernels
(`tpu_kernels.kernels.attention`, no Tokamax): attn_implementation "tpu_kernels_attention".

A call with no mask and as many keys as queries (a causal prefill, a training batch with
nothing padded) runs the shipped family's causal kernels with the layer's sliding window
(Mistral's, Qwen2's and Gemma 2's sliding layers) and the kv heads in place, no `repeat_kv`.
Every other call (a padding mask, a decode step against the cache, dropout, soft-capped
logits) runs HF's own sdpa attention, as attn_implementation="sdpa" would.

The mask function is HF's sdpa mask, which returns None (no mask) when nothing is padded and
the queries are the keys; for a sliding layer HF builds the window into a mask instead, so
here it is skipped on the same condition and the kernels apply the window.
"""

from __future__ import annotations

import torch

SHIPPED = "tpu_kernels_attention"


def _runs_the_kernel(query, key, attention_mask, dropout, causal, kwargs) -> bool:
    return (
        attention_mask is None
        and causal
        and not dropout
        and query.shape[2] == key.shape[2]
        and kwargs.get("softcap") is None
        and kwargs.get("position_bias") is None
        and not kwargs.get("output_attentions")
    )


def shipped_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,  # [batch, heads, q_len, head_dim]
    key: torch.Tensor,  # [batch, kv_heads, kv_len, head_dim]
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    sliding_window: int | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """HF's AttentionInterface signature; returns ([batch, q_len, heads, head_dim], None)."""
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    if _runs_the_kernel(query, key, attention_mask, dropout, causal, kwargs):
        from tpu_kernels.kernels.attention import attention

        out = attention(query, key, value, causal=True, scale=scaling, window=sliding_window)
        return out.transpose(1, 2).contiguous(), None
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if sliding_window is not None:
        kwargs["sliding_window"] = sliding_window
        if attention_mask is None and causal and query.shape[2] == key.shape[2]:
            # shipped_mask skipped this sliding layer's mask for the kernels; sdpa needs it back
            attention_mask = _window_mask(query.shape[2], sliding_window, query.device)
    return sdpa_attention_forward(
        module,
        query,
        key,
        value,
        attention_mask,
        dropout=dropout,
        scaling=scaling,
        is_causal=is_causal,
        **kwargs,
    )


def _window_mask(n: int, window: int, device) -> torch.Tensor:
    """[1, 1, n, n] True where query i sees key j: i - window < j <= i (HF's sliding causal mask)."""
    i = torch.arange(n, device=device)[:, None]
    j = torch.arange(n, device=device)[None, :]
    return ((j <= i) & (j > i - window))[None, None]


def shipped_mask(batch_size, q_length, kv_length, q_offset=0, kv_offset=0, *args, local_size=None, **kwargs):
    """HF's sdpa mask, and no mask for a sliding layer where a plain causal one would be
    skipped and the queries are the keys (the kernels apply the window themselves)."""
    from transformers.masking_utils import sdpa_mask

    # a positional argument past the offsets (a mask function, a padding mask) leaves HF's mask as it is
    if (
        not args
        and local_size is not None
        and q_length == kv_length
        and not _offset(q_offset)
        and not _offset(kv_offset)
    ):
        plain = dict(kwargs, allow_is_causal_skip=True)
        plain.pop("mask_function", None)
        if sdpa_mask(batch_size, q_length, kv_length, q_offset, kv_offset, **plain) is None:
            return None
    return sdpa_mask(
        batch_size, q_length, kv_length, q_offset, kv_offset, *args, local_size=local_size, **kwargs
    )


def _offset(value) -> bool:
    """Whether a position offset may be nonzero (a traced tensor offset is not read)."""
    return isinstance(value, torch.Tensor) or bool(value)


def register() -> None:
    """Registers "tpu_kernels_attention" with HF's attention and mask interfaces."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(SHIPPED, shipped_attention_forward)
    AttentionMaskInterface.register(SHIPPED, shipped_mask)
