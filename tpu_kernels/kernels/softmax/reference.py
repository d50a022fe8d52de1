"""References for softmax."""

import jax
import jax.numpy as jnp
import torch

from tpu_kernels.verification.tolerance import Reference


def softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


def softmax_jax(x: jax.Array, *, block_rows: int = 256) -> jax.Array:
    del block_rows
    return jax.nn.softmax(x.astype(jnp.promote_types(x.dtype, jnp.float32)), axis=-1).astype(x.dtype)


# Checked mode's declaration (tpu_kernels.checked()), the Pallas op's and its Helion twin's:
# outputs lie in [0, 1] and the row sum errs relative to itself, so the tolerance table's
# atol needs no scale and there is no reduction to declare.
CHECK = Reference(softmax)
