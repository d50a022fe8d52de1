"""linear_cross_entropy's JAX references (no torch: the chip probe imports them on a TPU host
without torch).

`linear_cross_entropy_jax` is the kernels' arithmetic written densely: float32 logits (float64
stays float64), the loss and the per-token log-sum-exp. `linear_cross_entropy_xla` is the
unfused baseline a torch user writes, `F.cross_entropy(hidden @ weight.T, labels)`: logits in
the inputs' dtype, written whole, then the loss in float32.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

REDUCTIONS = ("mean", "sum", "none")


def _acc(dtype) -> jnp.dtype:
    return jnp.promote_types(dtype, jnp.float32)


def capped(logits: jax.Array, softcap: float | None) -> jax.Array:
    """softcap * tanh(logits / softcap) (Gemma 2's final soft-capping), or the logits."""
    return logits if softcap is None else softcap * jnp.tanh(logits / softcap)


def token_losses(
    z: jax.Array, labels: jax.Array, *, ignore_index: int, label_smoothing: float
) -> tuple[jax.Array, jax.Array]:
    """-> (each token's loss, each token's log-sum-exp) from [tokens, vocabulary] logits `z`:
    0 for an ignored token, NaN for a label outside [0, vocabulary) (torch raises there; a
    kernel cannot, so the loss says it loudly rather than guess)."""
    vocab = z.shape[-1]
    lse = jax.nn.logsumexp(z, axis=-1)
    picked = jnp.take_along_axis(z, jnp.clip(labels, 0, vocab - 1)[:, None].astype(jnp.int32), axis=-1)[:, 0]
    nll = lse - picked
    if label_smoothing:
        nll = (1 - label_smoothing) * nll + label_smoothing * (lse - jnp.mean(z, axis=-1))
    ignored = labels == ignore_index
    in_range = (labels >= 0) & (labels < vocab)
    return jnp.where(ignored, 0.0, jnp.where(in_range, nll, jnp.nan)).astype(z.dtype), lse


def reduce(losses: jax.Array, labels: jax.Array, *, ignore_index: int, reduction: str) -> jax.Array:
    """torch's reductions: "mean" over the tokens not ignored (NaN when none is), "sum", "none"."""
    if reduction == "none":
        return losses
    total = jnp.sum(losses)
    if reduction == "sum":
        return total
    return total / jnp.sum(labels != ignore_index).astype(losses.dtype)


def linear_cross_entropy_jax(
    hidden: jax.Array,
    weight: jax.Array,
    labels: jax.Array,
    *,
    ignore_index: int = -100,
    reduction: str = "mean",
    softcap: float | None = None,
    label_smoothing: float = 0.0,
) -> tuple[jax.Array, jax.Array]:
    """-> (loss in hidden's dtype, lse [tokens] float32) with the [tokens, vocabulary] logits
    materialised in float32: the kernels' result, densely."""
    acc = _acc(hidden.dtype)
    logits = jnp.dot(hidden, weight.T, preferred_element_type=acc).astype(acc)
    losses, lse = token_losses(
        capped(logits, softcap), labels, ignore_index=ignore_index, label_smoothing=label_smoothing
    )
    loss = reduce(losses, labels, ignore_index=ignore_index, reduction=reduction)
    return loss.astype(hidden.dtype), lse


def linear_cross_entropy_xla(
    hidden: jax.Array,
    weight: jax.Array,
    labels: jax.Array,
    *,
    ignore_index: int = -100,
    reduction: str = "mean",
    softcap: float | None = None,
    label_smoothing: float = 0.0,
) -> jax.Array:
    """The unfused baseline, `F.cross_entropy(hidden @ weight.T, labels)` as XLA runs it: the
    logits in the inputs' dtype (as torch's matmul returns them), then the loss in float32."""
    logits = capped((hidden @ weight.T).astype(_acc(hidden.dtype)), softcap)
    losses, _ = token_losses(logits, labels, ignore_index=ignore_index, label_smoothing=label_smoothing)
    return reduce(losses, labels, ignore_index=ignore_index, reduction=reduction).astype(hidden.dtype)


__all__ = [
    "REDUCTIONS",
    "capped",
    "linear_cross_entropy_jax",
    "linear_cross_entropy_xla",
    "reduce",
    "token_losses",
]
