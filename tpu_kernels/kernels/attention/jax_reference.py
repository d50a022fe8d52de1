"""attention's JAX references (no torch: the chip runner imports them on a TPU host without torch)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp


def visible(seq_q: int, seq_k: int, *, causal: bool, window: int | None) -> jax.Array | None:
    """[seq_q, seq_k] True where a query sees a key (None: everywhere), the kernels' rule:
    causal is top-left aligned (j <= i), and a window of w also needs i - w < j."""
    if not causal:
        return None
    rows, cols = jnp.arange(seq_q)[:, None], jnp.arange(seq_k)[None, :]
    seen = cols <= rows
    if window is not None:
        seen = seen & (cols > rows - window)
    return seen


def attention_jax(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    causal: bool = False,
    scale: float | None = None,
    window: int | None = None,
    block_q: int | None = None,
    block_k: int | None = None,
) -> tuple[jax.Array, jax.Array]:
    """-> (out, lse) as the kernels compute them, materialising the [seq_q, seq_k] scores in
    float32 (float64 stays float64); grouped kv heads are read in place, not repeated."""
    del block_q, block_k  # the kernels' tunables: they cannot change the result
    acc = jnp.promote_types(q.dtype, jnp.float32)
    b, h, sq, d = q.shape
    hk, sk = k.shape[1], k.shape[2]
    sm = (1.0 / math.sqrt(d) if d else 1.0) if scale is None else scale
    qg = q.astype(acc).reshape(b, hk, h // max(hk, 1), sq, d)
    s = jnp.einsum("bkgqd,bksd->bkgqs", qg, k.astype(acc)) * sm
    seen = visible(sq, sk, causal=causal, window=window)
    if seen is not None:
        s = jnp.where(seen, s, -jnp.inf)
    lse = jax.nn.logsumexp(s, axis=-1)
    p = jnp.exp(s - lse[..., None])
    out = jnp.einsum("bkgqs,bksd->bkgqd", p, v.astype(acc))
    return out.reshape(b, h, sq, d).astype(q.dtype), lse.reshape(b, h, sq)


def attention_xla(q, k, v, *, causal: bool = False, scale: float | None = None, window: int | None = None):
    """XLA's own attention (`jax.nn.dot_product_attention`, [batch, seq, heads, head_dim]),
    the chip runner's baseline: grouped kv heads natively, the window as a local window."""
    local = None if window is None else (window - 1, 0)
    out = jax.nn.dot_product_attention(
        q.transpose(0, 2, 1, 3),
        k.transpose(0, 2, 1, 3),
        v.transpose(0, 2, 1, 3),
        scale=scale,
        is_causal=causal,
        local_window_size=local,
    )
    return out.transpose(0, 2, 1, 3)


__all__ = ["attention_jax", "attention_xla", "visible"]
