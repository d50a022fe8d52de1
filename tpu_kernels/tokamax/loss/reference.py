"""Plain-torch reference of linear_softmax_cross_entropy_loss: F.cross_entropy of a linear
layer, for tests (in float64) and benchmarks (as baselines)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def linear_softmax_cross_entropy_loss(x, labels, weight, *, reduction="sum") -> torch.Tensor:
    """F.cross_entropy of the linear layer x @ weight (weight [H, V])."""
    return F.cross_entropy(x @ weight, labels.long(), reduction=reduction)


__all__ = ["linear_softmax_cross_entropy_loss"]
