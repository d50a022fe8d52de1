"""rmsnorm's JAX references (no torch: the chip runner imports them on a TPU host without torch)."""

import jax
import jax.numpy as jnp


def _acc(dtype) -> jnp.dtype:
    return jnp.promote_types(dtype, jnp.float32)


def rmsnorm_jax(x: jax.Array, weight: jax.Array, *, eps: float = 1e-6, block_rows: int | None = None):
    """-> (y, inv_rms) as the kernel computes them: statistics in float32, y in x's dtype."""
    del block_rows
    xf = x.astype(_acc(x.dtype))
    r = jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)
    return (xf * r * weight.astype(xf.dtype)).astype(x.dtype), r


def rmsnorm_backward_jax(
    x: jax.Array, weight: jax.Array, inv_rms: jax.Array, grad_y: jax.Array, *, block_rows: int | None = None
):
    """-> (dx, dweight) from the forward's saved inv_rms, the backward kernel's math."""
    del block_rows
    acc = _acc(x.dtype)
    xf, r = x.astype(acc), inv_rms.astype(acc)
    dy, w = grad_y.astype(acc), weight.astype(acc)
    xhat, g = xf * r, dy * w
    dx = r * (g - xhat * jnp.mean(g * xhat, axis=-1, keepdims=True))
    dw = jnp.sum((dy * xhat).reshape(-1, x.shape[-1]), axis=0)
    return dx.astype(x.dtype), dw.astype(weight.dtype)
