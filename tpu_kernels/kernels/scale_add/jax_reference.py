"""scale_add's JAX reference (no torch: the chip runner imports it on a TPU host without torch)."""

import jax
import jax.numpy as jnp


def scale_add_jax(x: jax.Array, y: jax.Array, *, alpha: float = 1.0, block_rows: int | None = None) -> jax.Array:
    """x + alpha * y computed in float32 (float64 stays float64), in the promoted input dtype."""
    del block_rows
    dtype = jnp.result_type(x, y)
    acc = jnp.promote_types(dtype, jnp.float32)
    return (x.astype(acc) + alpha * y.astype(acc)).astype(dtype)
