"""References for rmsnorm, and checked mode's declaration of the family's ops."""

import torch

from tpu_kernels.verification.tolerance import Reference, rows


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, *, eps: float = 1e-6) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rmsnorm_dx(
    x: torch.Tensor, weight: torch.Tensor, inv_rms: torch.Tensor, grad_y: torch.Tensor
) -> torch.Tensor:
    """x's gradient from the forward's inv_rms (one value per row of a 2-D x)."""
    r = inv_rms.reshape(-1, 1)
    xhat, g = x * r, grad_y * weight
    return r * (g - xhat * (g * xhat).mean(-1, keepdim=True))


def rmsnorm_dweight(x: torch.Tensor, inv_rms: torch.Tensor, grad_y: torch.Tensor) -> torch.Tensor:
    """weight's gradient: the sum over rows of grad_y * x * inv_rms."""
    return (grad_y * x * inv_rms.reshape(-1, 1)).sum(0)


def _size(weight: torch.Tensor) -> float:
    # y = x / rms(x) * w: |y| reaches about 3 |w| (a normal x's largest |x / rms(x)|)
    return 3 * max(1.0, weight.detach().abs().amax().item() if weight.numel() else 1.0)


# Checked mode's declarations (tpu_kernels.checked()), the Pallas ops' and their Helion
# twins'. The forward's mean square errs relative to itself (rtol covers it): no reduction;
# weight's gradient sums over every row.
CHECK = Reference(rmsnorm, scale=_size, grad_reduces=lambda x: {"weight": rows(x)})
CHECK_DX = Reference(rmsnorm_dx, scale=_size)
CHECK_DWEIGHT = Reference(rmsnorm_dweight, scale=3, reduces=lambda x: x.shape[0])
