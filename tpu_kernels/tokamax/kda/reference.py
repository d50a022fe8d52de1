"""Plain-torch reference of kimi_delta_attention: the delta-rule recurrence token by token,
for tests (in float64) and benchmarks (as baselines).
Its parameters are named as op.py's (see `tokamax/registry.py`)."""

from __future__ import annotations

import torch


def kimi_delta_attention(
    query, key, value, gate, beta, *, scale=None, use_qk_l2norm=False
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


__all__ = ["kimi_delta_attention"]
