"""References for matmul: torch for checking, JAX for deriving the backward."""

import jax
import jax.numpy as jnp
import torch

from tpu_kernels.verification.tolerance import Reference, rms


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a @ b


def matmul_jax(
    a: jax.Array, b: jax.Array, *, block_m: int = 256, block_n: int = 256, block_k: int = 256
) -> jax.Array:
    """Differentiable JAX twin of the Pallas kernel (same signature, same accumulation)."""
    del block_m, block_n, block_k
    acc = jnp.promote_types(a.dtype, jnp.float32)
    return jnp.matmul(a, b, preferred_element_type=acc).astype(a.dtype)


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
