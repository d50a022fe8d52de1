"""References for scale_add."""

import torch


def scale_add(x: torch.Tensor, y: torch.Tensor, *, alpha: float = 1.0) -> torch.Tensor:
    return x + alpha * y
