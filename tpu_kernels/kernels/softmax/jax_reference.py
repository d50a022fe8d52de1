"""softmax's JAX reference (no torch: the chip runner imports it on a TPU host without torch)."""

import jax
import jax.numpy as jnp


def softmax_jax(x: jax.Array, *, block_rows: int | None = None) -> jax.Array:
    """Softmax over the last dimension in float32 (float64 stays float64), rounded to x's dtype."""
    del block_rows  # the kernel's tunable: it cannot change the result
    return jax.nn.softmax(x.astype(jnp.promote_types(x.dtype, jnp.float32)), axis=-1).astype(x.dtype)


def softmax_backward_jax(out: jax.Array, grad_out: jax.Array, *, block_rows: int | None = None) -> jax.Array:
    """The backward kernel's math: dx = y * (dy - sum(dy * y))."""
    del block_rows
    acc = jnp.promote_types(out.dtype, jnp.float32)
    y, dy = out.astype(acc), grad_out.astype(acc)
    return (y * (dy - jnp.sum(dy * y, axis=-1, keepdims=True))).astype(out.dtype)
