"""References for softmax."""

import torch

from tpu_kernels.kernels.softmax.jax_reference import softmax_jax
from tpu_kernels.verification.tolerance import Reference


def softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


# Checked mode's declaration (tpu_kernels.checked()), the Pallas op's and its Helion twin's:
# outputs lie in [0, 1] and the row sum errs relative to itself, so the tolerance table's
# atol needs no scale and there is no reduction to declare.
CHECK = Reference(softmax)


__all__ = ["CHECK", "softmax", "softmax_jax"]
