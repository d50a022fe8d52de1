"""Plain-torch reference of linear_softmax_cross_entropy_loss: F.cross_entropy of a linear
layer, for tests (in float64) and benchmarks (as baselines)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def linear_softmax_cross_entropy_loss(
    x, labels, weight, *, reduction="sum", weight_layout="in_out"
) -> torch.Tensor:
    """F.cross_entropy of the linear layer x @ weight (weight [H, V]; [V, H] for "out_in")."""
    if weight_layout == "out_in":
        weight = weight.T
    return F.cross_entropy(x @ weight, labels.long(), reduction=reduction)


__all__ = ["linear_softmax_cross_entropy_loss"]
