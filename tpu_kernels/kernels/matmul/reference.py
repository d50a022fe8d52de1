"""References for matmul: torch for checking, JAX for deriving the backward."""

import jax
import jax.numpy as jnp
import torch


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a @ b


def matmul_jax(
    a: jax.Array, b: jax.Array, *, block_m: int = 256, block_n: int = 256, block_k: int = 256
) -> jax.Array:
    """Differentiable JAX twin of the Pallas kernel (same signature, same accumulation)."""
    del block_m, block_n, block_k
    acc = jnp.promote_types(a.dtype, jnp.float32)
    return jnp.matmul(a, b, preferred_element_type=acc).astype(a.dtype)
