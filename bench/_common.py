"""Shared by the suites: fresh random inputs (never zeros) and the sweep axes."""

from __future__ import annotations

import torch

FLOATS = [torch.float32, torch.bfloat16]


def randn(*shape: int, dtype: torch.dtype, device: torch.device, scale: float = 1.0) -> torch.Tensor:
    """Standard-normal values drawn in float32 and rounded to `dtype`, on `device`."""
    return (torch.randn(*shape, device=device) * scale).to(dtype)
