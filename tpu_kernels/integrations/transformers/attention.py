"""Hugging Face's attention interface on Tokamax's attention, with bucketed key/value lengths.

HF calls an attention function with query [batch, heads, q_len, head_dim], key and value
[batch, kv_heads, kv_len, head_dim] and the mask that the registered mask function built;
it wants [batch, q_len, heads, head_dim] back. Tokamax's attention takes the kv-heads as
they are (grouped-query attention without `repeat_kv`).

Buckets: the op compiles once per shape, and a generation step grows the key/value length
by one, so without buckets each new token compiles attention again (16 new tokens: 16
compiles, issue 17). "tpu_kernels" pads key/value (and a prefill's queries) to a bucket
length with the mask covering the padding, so a generation compiles once per bucket;
"tpu_kernels_unpadded" runs the exact shapes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tpu_kernels.dispatch.buckets import bucket_size, powers_of_two

NAME = "tpu_kernels"  # padded to buckets
UNPADDED = "tpu_kernels_unpadded"

# Lengths up to 1024 go to the next power of two (at least MIN_BUCKET); longer ones to the
# next multiple of 1024, so padding wastes at most half the work below 1024 and at most 1023
# positions above it. 64 keeps a short chat prompt plus its answer in one or two buckets.
MIN_BUCKET = 64
LARGE_STEP = 1024
KV_BUCKETS = powers_of_two(LARGE_STEP, minimum=MIN_BUCKET)  # tpu_kernels' schedule (docs/buckets.md)


def bucket(n: int, minimum: int = MIN_BUCKET) -> int:
    """The padded length for a sequence of n >= 1 positions."""
    spec = KV_BUCKETS if minimum == MIN_BUCKET else powers_of_two(LARGE_STEP, minimum=minimum)
    return bucket_size(n, spec)


def dot_product_attention(*args, **kwargs):
    """tpu_kernels.tokamax.dot_product_attention, imported at the first call: the package
    imports without Tokamax (Python 3.11), where shipped_attention.py runs instead."""
    from tpu_kernels.tokamax import dot_product_attention as op

    return op(*args, **kwargs)


def _default_mask(query: torch.Tensor, key: torch.Tensor, is_causal: bool) -> torch.Tensor:
    """The mask HF's sdpa path means when it passes None: causal top-left (it crops the keys
    to q_len, and key j > i is masked either way) for a prefill, else every key."""
    q_len, kv_len = query.shape[2], key.shape[2]
    if is_causal and q_len > 1:
        i = torch.arange(q_len, device=query.device)[:, None]
        j = torch.arange(kv_len, device=query.device)[None, :]
        return (j <= i)[None, None]
    return torch.ones((1, 1, q_len, kv_len), dtype=torch.bool, device=query.device)


def _static_int(n) -> bool:
    # Under torch.compile with dynamic shapes a length is a SymInt: leave the shapes to the
    # compiler there (one graph serves every length), and pad only real ints.
    return isinstance(n, int)


def attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,  # [batch, heads, q_len, head_dim]
    key: torch.Tensor,  # [batch, kv_heads, kv_len, head_dim]
    value: torch.Tensor,  # [batch, kv_heads, kv_len, head_dim_v]
    attention_mask: torch.Tensor | None,  # bool [batch, 1, q_len, kv_len], True = attend
    dropout: float = 0.0,
    scaling: float | None = None,
    softcap: float | None = None,
    is_causal: bool | None = None,
    *,
    pad: bool = True,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """HF's AttentionInterface signature; returns ([batch, q_len, heads, head_dim_v], None)."""
    if dropout:
        raise NotImplementedError(
            f"tpu_kernels attention: dropout={dropout}, but Tokamax's attention has no dropout; "
            "set the config's attention_dropout to 0, call model.eval(), or use attn_implementation='sdpa'."
        )
    if kwargs.get("position_bias") is not None:
        raise NotImplementedError(
            "tpu_kernels attention: position_bias is not supported; use attn_implementation='sdpa'."
        )
    if kwargs.get("output_attentions"):
        raise NotImplementedError(
            "tpu_kernels attention: output_attentions=True needs the attention weights, which the "
            "kernel does not return; use attn_implementation='eager'."
        )
    q_len, kv_len = query.shape[2], key.shape[2]
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    bias, mask = None, attention_mask
    if mask is None:
        mask = _default_mask(query, key, causal)
    elif mask.dtype != torch.bool:  # an additive float mask (a user's own mask function)
        bias, mask = mask, None
    # Tokamax's own layout, [batch, seq, heads, head_dim]: HF's query is one after the
    # transpose (a decode step's single query row is contiguous so), and key/value cross
    # contiguous in one copy, the padding's or .contiguous()'s, never a torch transpose
    # copied again at the crossing
    query, key, value = (t.transpose(1, 2) for t in (query, key, value))
    if pad and _static_int(q_len) and _static_int(kv_len):
        kv_pad = bucket(kv_len) - kv_len
        q_pad = bucket(q_len) - q_len if q_len > 1 else 0  # decoding steps stay at one query
        if kv_pad:
            key = F.pad(key, (0, 0, 0, 0, 0, kv_pad))
            value = F.pad(value, (0, 0, 0, 0, 0, kv_pad))
        if q_pad:
            query = F.pad(query, (0, 0, 0, 0, 0, q_pad))
        if kv_pad or q_pad:
            if mask is not None:
                mask = F.pad(mask, (0, kv_pad, 0, q_pad), value=False)
            else:  # padded keys get the dtype's lowest value: exp() of it is 0 after the max shift
                bias = F.pad(bias, (0, kv_pad, 0, q_pad), value=torch.finfo(bias.dtype).min)
    # each torch call here is paid per layer and per decode step: only the ones that do work
    query, key, value = (t if t.is_contiguous() else t.contiguous() for t in (query, key, value))
    out = dot_product_attention(query, key, value, bias, mask, scale=scaling, logits_soft_cap=softcap)
    # Padded query rows (all keys masked) hold the mean of value; they are dropped here.
    return (out if out.shape[1] == q_len else out[:, :q_len].contiguous()), None


def attention_forward_unpadded(module, query, key, value, attention_mask, **kwargs):
    """The same without buckets: one compile per (q_len, kv_len)."""
    return attention_forward(module, query, key, value, attention_mask, pad=False, **kwargs)


def mask_function(*args, **kwargs):
    """HF's sdpa boolean mask, always materialised: with `None` (HF's shortcut for a plain
    causal mask) left-padded batches would lose their padding mask (issue 17: logits off by
    1.0) and the bucket padding would have nothing to extend."""
    from transformers.masking_utils import sdpa_mask

    kwargs["allow_is_causal_skip"] = False
    return sdpa_mask(*args, **kwargs)


def register() -> None:
    """Registers "tpu_kernels" and "tpu_kernels_unpadded" (Tokamax's attention) and
    "tpu_kernels_attention" (tpu_kernels' own kernels, shipped_attention.py) with HF's attention and mask interfaces."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    from tpu_kernels.integrations.transformers import shipped_attention

    shipped_attention.register()

    AttentionInterface.register(NAME, attention_forward)
    AttentionInterface.register(UNPADDED, attention_forward_unpadded)
    AttentionMaskInterface.register(NAME, mask_function)
    AttentionMaskInterface.register(UNPADDED, mask_function)
