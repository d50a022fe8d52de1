"""Plain-torch reference of deepseek_rope: the GPT-J (interleaved) rotation, for tests
(in float64) and benchmarks (as baselines)."""

from __future__ import annotations

import torch


def deepseek_rope(x, positions, cos_sin_cache, *, mode="rope", inverse=False, eps=1e-6) -> torch.Tensor:
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


__all__ = ["deepseek_rope"]
