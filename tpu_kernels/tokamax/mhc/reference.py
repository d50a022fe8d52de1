"""Plain-torch references of DeepSeek-V4's hyper-connections (mhc_pre, mhc_post,
mhc_fused_post_pre), for tests (in float64) and benchmarks (as baselines).
Their parameters are named as op.py's (see `tokamax/registry.py`)."""

from __future__ import annotations

import math

import torch


def mhc_pre(
    residual, fn, hc_scale, hc_base, rms_eps, hc_pre_eps, hc_sinkhorn_eps, hc_post_mult_value, sinkhorn_repeat
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


def mhc_post(x, residual, post_layer_mix, comb_res_mix) -> torch.Tensor:
    """new_residual[j] = post_layer_mix[j] * x + sum_i comb_res_mix[i, j] * residual[i]."""
    t, h = x.shape
    m = comb_res_mix.shape[-1]
    mixed = torch.einsum("tij,tih->tjh", comb_res_mix, residual.reshape(t, m, h))
    return (mixed + post_layer_mix[:, :, None] * x[:, None, :]).reshape(t, m * h)


def mhc_fused_post_pre(x, residual, post_layer_mix, comb_res_mix, fn, hc_scale, hc_base, **constants):
    """mhc_post, then mhc_pre on the new residual. Tokamax rounds the new residual to x's
    dtype before the pre step; in float64 there is no such rounding, so checked mode holds
    this op to the streams' dtype's tolerance (`computes_in` in op.py)."""
    new_residual = mhc_post(x, residual, post_layer_mix, comb_res_mix)
    return (new_residual, *mhc_pre(new_residual, fn, hc_scale, hc_base, **constants))


__all__ = ["mhc_fused_post_pre", "mhc_post", "mhc_pre"]
