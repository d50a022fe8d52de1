"""Plain-torch references of layer_norm and rms_norm: F.layer_norm and F.rms_norm over `dim`,
for tests (in float64) and benchmarks (as baselines).
Their parameters are named as op.py's (see `tokamax/registry.py`)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def layer_norm(
    x, weight=None, bias=None, *, dim=-1, eps=1e-6, scale_offset=0.0, subtract_mean=True
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


def rms_norm(x, weight=None, *, dim=-1, eps=1e-6, scale_offset=0.0) -> torch.Tensor:
    return layer_norm(x, weight, None, dim=dim, eps=eps, scale_offset=scale_offset, subtract_mean=False)


__all__ = ["layer_norm", "rms_norm"]
