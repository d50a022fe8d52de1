"""Plain-torch references of the Tokamax ops, for tests (in float64) and benchmarks (as baselines).

Each takes the same arguments and layouts as the function of the same name in
`tpu_kernels.tokamax`, and is built from the torch function a user would
otherwise call (F.scaled_dot_product_attention, F.layer_norm, F.rms_norm,
F.cross_entropy, matmuls in loops), written out where Tokamax's semantics need
it (soft cap, masked rows). Differentiable with torch autograd.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

# ---- attention ---------------------------------------------------------------------------


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
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    bias: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    *,
    scale: float | None = None,
    is_causal: bool = False,
    query_seq_lengths: torch.Tensor | None = None,
    key_value_seq_lengths: torch.Tensor | None = None,
    local_window_size: int | tuple[int, int] | None = None,
    logits_soft_cap: float | None = None,
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
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    """torch's own, [*batch, heads, seq, head_dim], with GQA."""
    return F.scaled_dot_product_attention(
        query, key, value, attn_mask=attn_mask, is_causal=is_causal, scale=scale, enable_gqa=True
    )


# ---- normalisation -----------------------------------------------------------------------


def layer_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    *,
    dim: int = -1,
    eps: float = 1e-6,
    scale_offset: float = 0.0,
    subtract_mean: bool = True,
) -> torch.Tensor:
    """F.layer_norm (or F.rms_norm for subtract_mean=False) over `dim`."""
    xt = x.movedim(dim, -1)
    w = None if weight is None else weight + scale_offset
    if subtract_mean:
        y = F.layer_norm(xt, (xt.shape[-1],), w, bias, eps)
    else:
        y = F.rms_norm(xt, (xt.shape[-1],), w, eps)
        if bias is not None:
            y = y + bias
    return y.movedim(-1, dim)


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    *,
    dim: int = -1,
    eps: float = 1e-6,
    scale_offset: float = 0.0,
) -> torch.Tensor:
    return layer_norm(x, weight, None, dim=dim, eps=eps, scale_offset=scale_offset, subtract_mean=False)


# ---- gated linear unit -------------------------------------------------------------------

ACTIVATIONS = {
    None: lambda x: x,
    "silu": F.silu,
    "swish": F.silu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
}


def gated_linear_unit(
    x: torch.Tensor,
    weight: torch.Tensor,
    weight_up: torch.Tensor | None = None,
    *,
    activation: str | None = None,
) -> torch.Tensor:
    """SwiGLU/GEGLU/...: activation(x @ w_gate) * (x @ w_up)."""
    w_gate, w_up = (weight[:, 0], weight[:, 1]) if weight_up is None else (weight, weight_up)
    return ACTIVATIONS[activation](x @ w_gate) * (x @ w_up)


# ---- ragged dot --------------------------------------------------------------------------


def _group_bounds(group_sizes: torch.Tensor, m: int) -> list[tuple[int, int]]:
    ends = torch.cumsum(group_sizes.to(torch.int64), 0).clamp(max=m).tolist()
    starts = [0] + ends[:-1]
    return list(zip(starts, ends))


def ragged_dot(
    lhs: torch.Tensor,
    rhs: torch.Tensor,
    group_sizes: torch.Tensor,
    *,
    preferred_element_type: torch.dtype | None = None,
) -> torch.Tensor:
    """Grouped matmul by a loop over groups; rows past sum(group_sizes) are zero."""
    out = lhs.new_zeros((lhs.shape[0], rhs.shape[-1]), dtype=torch.promote_types(lhs.dtype, rhs.dtype))
    for g, (start, end) in enumerate(_group_bounds(group_sizes, lhs.shape[0])):
        if end > start:
            out = out.index_add(0, torch.arange(start, end, device=lhs.device), lhs[start:end] @ rhs[g])
    return out if preferred_element_type is None else out.to(preferred_element_type)


def ragged_dot_contracting(lhs: torch.Tensor, rhs: torch.Tensor, group_sizes: torch.Tensor) -> torch.Tensor:
    """ragged_dot_general with the ragged dimension contracted: out[g] = lhs[rows_g].T @ rhs[rows_g]."""
    blocks = [lhs[s:e].T @ rhs[s:e] for s, e in _group_bounds(group_sizes, lhs.shape[0])]
    return torch.stack(blocks)


# ---- loss --------------------------------------------------------------------------------


def linear_softmax_cross_entropy_loss(
    x: torch.Tensor, labels: torch.Tensor, weight: torch.Tensor, *, reduction: str = "sum"
) -> torch.Tensor:
    """F.cross_entropy of the linear layer x @ weight (weight [H, V])."""
    return F.cross_entropy(x @ weight, labels.long(), reduction=reduction)


# ---- triangle multiplication -------------------------------------------------------------


def triangle_multiplication(
    x: torch.Tensor,
    mask: torch.Tensor,
    projection_in_weights: torch.Tensor,
    gate_in_weights: torch.Tensor,
    projection_out_weights: torch.Tensor,
    gate_out_weights: torch.Tensor,
    layernorm_in_scale: torch.Tensor,
    layernorm_in_offset: torch.Tensor,
    layernorm_out_scale: torch.Tensor,
    layernorm_out_offset: torch.Tensor,
    triangle_type: str,
    *,
    eps: float = 1e-6,
) -> torch.Tensor:
    """AlphaFold 2's triangle multiplicative update (Algorithm 11 outgoing, 12 incoming)."""
    n, _, c = x.shape
    h = projection_in_weights.shape[-1]
    xn = F.layer_norm(x, (c,), layernorm_in_scale, layernorm_in_offset, eps)
    a = torch.sigmoid(xn @ gate_in_weights.reshape(c, 2 * h)) * (xn @ projection_in_weights.reshape(c, 2 * h))
    a = a.reshape(n, n, 2, h) * mask[..., None, None].to(a.dtype)
    left, right = a[:, :, 0], a[:, :, 1]
    if triangle_type == "outgoing":
        act = torch.einsum("ikc,jkc->ijc", left, right)
    else:
        act = torch.einsum("kjc,kic->ijc", left, right)
    act = F.layer_norm(act, (h,), layernorm_out_scale, layernorm_out_offset, eps)
    return (act @ projection_out_weights) * torch.sigmoid(xn @ gate_out_weights)


# ---- tokamax.ops extras ------------------------------------------------------------------


def top_k(
    scores: torch.Tensor, k: int, row_lengths: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """torch.topk over each row's first row_lengths[i] columns -> (indices, values), -1/-inf padded."""
    n = scores.shape[1]
    masked = scores
    if row_lengths is not None:
        masked = scores.masked_fill(
            torch.arange(n, device=scores.device) >= row_lengths[:, None], float("-inf")
        )
    values, indices = _topk_lowest_index_first(masked, k)
    return indices.masked_fill(values == float("-inf"), -1).to(torch.int32), values


def router_topk(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The top k of the float32 scores, ties to the lowest index -> (weights, indices)."""
    values, indices = _topk_lowest_index_first(scores.float(), k)
    return values, indices.to(torch.int32)


def _topk_lowest_index_first(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    # torch.topk leaves the order of ties unspecified (they are common in bfloat16 scores);
    # a stable descending sort keeps equal values in index order, as Tokamax does.
    values, indices = torch.sort(scores, dim=1, descending=True, stable=True)
    return values[:, :k], indices[:, :k]


def ragged_gather(
    x: torch.Tensor, indices: torch.Tensor, start: torch.Tensor, end: torch.Tensor
) -> torch.Tensor:
    return x[indices.long()]


def ragged_gather_reduce(
    x: torch.Tensor,
    indices: torch.Tensor,
    topk_weights: torch.Tensor,
    valid_rows_mask: torch.Tensor,
    reduce_group_size: int,
) -> torch.Tensor:
    """out[t] = sum of topk_weights[r] * x[indices[r]] over the valid routes r of token t."""
    routed = x[indices.long()] * (topk_weights * valid_rows_mask.to(topk_weights.dtype))[:, None]
    return routed.reshape(-1, reduce_group_size, x.shape[1]).sum(1)


def deepseek_rope(
    x: torch.Tensor,
    positions: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    *,
    mode: str = "rope",
    inverse: bool = False,
    eps: float = 1e-6,
) -> torch.Tensor:
    """GPT-J (interleaved) rotation of the trailing rotary_dim channels; "qnorm_rope" RMS-normalises first."""
    if mode == "qnorm_rope":
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    rotary = cos_sin_cache.shape[1]
    cos, sin = cos_sin_cache[positions.long()].to(x.dtype).chunk(2, dim=-1)
    cos, sin = cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1)
    if inverse:
        sin = -sin
    if x.ndim == 3:
        cos, sin = cos[:, None], sin[:, None]
    keep, rot = x[..., :-rotary], x[..., -rotary:]
    turned = torch.stack([-rot[..., 1::2], rot[..., 0::2]], dim=-1).reshape(rot.shape)
    return torch.cat([keep, rot * cos + turned * sin], dim=-1)


def mhc_pre(
    residual: torch.Tensor,
    fn: torch.Tensor,
    hc_scale: torch.Tensor,
    hc_base: torch.Tensor,
    rms_eps: float,
    hc_pre_eps: float,
    hc_sinkhorn_eps: float,
    hc_post_mult_value: float,
    sinkhorn_repeat: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """DeepSeek-V4 mHC pre: RMS-scaled mix logits -> sigmoid pre/post gates and a Sinkhorn-
    normalised stream-mixing matrix; the streams collapsed by the pre gates."""
    t = residual.shape[0]
    m = math.isqrt(fn.shape[0] + 1) - 1
    h = residual.shape[1] // m
    mixes = residual @ fn.T
    mixes = mixes * torch.rsqrt(residual.pow(2).sum(-1, keepdim=True) / (m * h) + rms_eps)
    pre = torch.sigmoid(mixes[:, :m] * hc_scale[0] + hc_base[:m]) + hc_pre_eps
    post = torch.sigmoid(mixes[:, m : 2 * m] * hc_scale[1] + hc_base[m : 2 * m]) * hc_post_mult_value
    comb = mixes[:, 2 * m :].reshape(t, m, m) * hc_scale[2] + hc_base[2 * m :].reshape(1, m, m)
    comb = torch.softmax(comb, dim=-1) + hc_sinkhorn_eps
    comb = comb / (comb.sum(-2, keepdim=True) + hc_sinkhorn_eps)
    for _ in range(sinkhorn_repeat - 1):
        comb = comb / (comb.sum(-1, keepdim=True) + hc_sinkhorn_eps)
        comb = comb / (comb.sum(-2, keepdim=True) + hc_sinkhorn_eps)
    layer_input = torch.einsum("tm,tmh->th", pre, residual.reshape(t, m, h))
    return post, comb, layer_input


def mhc_post(
    x: torch.Tensor, residual: torch.Tensor, post_layer_mix: torch.Tensor, comb_res_mix: torch.Tensor
) -> torch.Tensor:
    """new_residual[j] = post_layer_mix[j] * x + sum_i comb_res_mix[i, j] * residual[i]."""
    t, h = x.shape
    m = comb_res_mix.shape[-1]
    mixed = torch.einsum("tij,tih->tjh", comb_res_mix, residual.reshape(t, m, h))
    return (mixed + post_layer_mix[:, :, None] * x[:, None, :]).reshape(t, m * h)


def kimi_delta_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    gate: torch.Tensor,
    beta: torch.Tensor,
    *,
    scale: float | None = None,
    use_qk_l2norm: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The delta-rule recurrence token by token ([H, B, T, K] layout); -> (output, final state
    [B, 1, H, K, V]). Log-space gates, one segment, no initial state."""
    heads, batch, steps, k_dim = query.shape
    if use_qk_l2norm:
        query = query * torch.rsqrt(query.pow(2).sum(-1, keepdim=True) + 1e-6)
        key = key * torch.rsqrt(key.pow(2).sum(-1, keepdim=True) + 1e-6)
    query = query * (k_dim**-0.5 if scale is None else scale)
    state = query.new_zeros(heads, batch, k_dim, value.shape[-1])
    outputs = []
    for t in range(steps):
        state = state * torch.exp(gate[:, :, t])[..., None]
        k_t, v_t = key[:, :, t], value[:, :, t]
        residual = v_t - torch.einsum("hbk,hbkv->hbv", k_t, state)
        state = state + (beta[:, :, t, None] * k_t)[..., None] * residual[..., None, :]
        outputs.append(torch.einsum("hbk,hbkv->hbv", query[:, :, t], state))
    return torch.stack(outputs, dim=2), state.permute(1, 0, 2, 3)[:, None]


__all__: Sequence[str] = [
    "attention_mask",
    "deepseek_rope",
    "dot_product_attention",
    "gated_linear_unit",
    "kimi_delta_attention",
    "layer_norm",
    "linear_softmax_cross_entropy_loss",
    "mhc_post",
    "mhc_pre",
    "ragged_dot",
    "ragged_dot_contracting",
    "ragged_gather",
    "ragged_gather_reduce",
    "rms_norm",
    "router_topk",
    "scaled_dot_product_attention",
    "top_k",
    "triangle_multiplication",
]
