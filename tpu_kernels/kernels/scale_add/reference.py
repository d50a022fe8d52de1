"""References for scale_add, and checked mode's declaration of the family's ops."""

import torch

from tpu_kernels.verification.tolerance import Reference


def scale_add(x: torch.Tensor, y: torch.Tensor, *, alpha: float = 1.0) -> torch.Tensor:
    return x + alpha * y


def _amax(t: torch.Tensor) -> float:
    return t.detach().abs().amax().item() if t.numel() else 0.0


def _scale(x: torch.Tensor, y: torch.Tensor, alpha: float = 1.0) -> float:
    # x + alpha * y in float32 rounds alpha * y and the sum: an absolute error of about
    # one ulp of the larger term, which can be far above the result's (cancellation).
    return 2 * max(1.0, _amax(x), abs(alpha) * _amax(y))


def _broadcast(x: torch.Tensor, y: torch.Tensor) -> dict[str, int]:
    # An input broadcast to the output's shape gets a gradient summed over the copies.
    out = max(x.numel(), y.numel(), 1)
    return {"x": max(1, out // max(x.numel(), 1)), "y": max(1, out // max(y.numel(), 1))}


# Checked mode's declaration (tpu_kernels.checked()), the Pallas op's and its Helion twin's:
# y's gradient is alpha * grad, summed over the dimensions y was broadcast along (x's too).
CHECK = Reference(
    scale_add,
    scale=_scale,
    grad_scale=lambda alpha=1.0: 2 * max(1.0, abs(alpha)),
    grad_reduces=_broadcast,
)
