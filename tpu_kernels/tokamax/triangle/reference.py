"""Plain-torch reference of triangle_multiplication: AlphaFold 2's formula, for tests
(in float64) and benchmarks (as baselines)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def triangle_multiplication(
    x,
    mask,
    projection_in_weights,
    gate_in_weights,
    projection_out_weights,
    gate_out_weights,
    layernorm_in_scale,
    layernorm_in_offset,
    layernorm_out_scale,
    layernorm_out_offset,
    triangle_type,
    *,
    eps=1e-6,
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


__all__ = ["triangle_multiplication"]
