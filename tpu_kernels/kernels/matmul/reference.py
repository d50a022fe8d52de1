"""References for matmul: torch for checking; the JAX one (for deriving the backward) lives in
jax_reference.py, torch-free, and is re-exported here."""

import torch

from tpu_kernels.kernels.matmul.jax_reference import matmul_jax
from tpu_kernels.verification.tolerance import Reference, rms


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a @ b


def _terms(a: torch.Tensor, b: torch.Tensor) -> float:
    """The size of one product a[i, k] * b[k, j]: reduction_scale assumes unit-sized terms."""
    return max(1.0, rms(a) * rms(b))


# Checked mode's declaration (tpu_kernels.checked()), the Pallas op's and its Helion twin's:
# each output sums K products; a's gradient (grad @ b^T) sums N, b's (a^T @ grad) M.
CHECK = Reference(
    matmul,
    reduces=lambda a: a.shape[-1],
    grad_reduces=lambda a, b: {"a": b.shape[-1], "b": a.shape[0]},
    scale=_terms,
)


__all__ = ["CHECK", "matmul", "matmul_jax"]
