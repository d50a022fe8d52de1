"""The fused LM head + loss's points in the chip runner (tpu_kernels/chip, section "loss"):
the loss alone and forward + backward against XLA's unfused head, and their float64 host
reference."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tpu_kernels.chip.point import Point, err, f64, itemsize, randn

SECTION = "loss"
CHECK_TOKENS = 64  # tokens whose loss (and hidden gradient) the host checks in float64


def _lce64(h, w, y, tokens: int):
    """The first `tokens` tokens' losses and hidden gradients of a mean loss over all `y`'s
    non-ignored (-100) labels, in float64: [tokens], [tokens, d]."""
    hf, wf, yy = f64(h[:tokens]), f64(w), np.asarray(y[:tokens])
    z = hf @ wf.T
    m = z.max(-1, keepdims=True)
    lse = (m + np.log(np.exp(z - m).sum(-1, keepdims=True)))[:, 0]
    kept = yy != -100
    picked = z[np.arange(tokens), np.where(kept, yy, 0)]
    p = np.exp(z - lse[:, None])
    p[np.arange(tokens), np.where(kept, yy, 0)] -= 1.0
    dh = np.where(kept[:, None], p @ wf, 0.0) / max(int(np.sum(np.asarray(y) != -100)), 1)
    return np.where(kept, lse - picked, 0.0), dh


def points(h: Any, shapes, dtypes, statics: dict | None = None) -> list[Point]:
    """linear_cross_entropy (hidden [tokens, d], weight [vocabulary, d], labels, every fifth
    ignored) against XLA's unfused `cross_entropy(hidden @ weight.T, labels)`: the loss alone
    (`linear_cross_entropy_loss`, each token's: reduction "none") and the mean loss with its
    gradients for hidden and weight. Flops are the unfused path's (one matmul forward, three
    forward + backward). The host checks the first CHECK_TOKENS tokens' losses (and hidden
    gradients) in float64."""
    made = []
    for tokens, d, vocab in shapes:
        for dt in dtypes:
            tag = f"{dt}[{tokens},{d},{vocab}]"
            unit = 2.0 * tokens * d * vocab
            nbytes = (tokens * d + vocab * d) * itemsize(dt) + 4 * tokens

            def make(rng, tokens=tokens, d=d, vocab=vocab, dt=dt):
                y = rng.integers(0, vocab, tokens).astype(np.int32)
                y[::5] = -100
                return randn(rng, (tokens, d), dt), randn(rng, (vocab, d), dt, 1.0 / np.sqrt(d)), y

            def fwd(x, w, y):
                return h.pallas.linear_cross_entropy_loss(x, w, y, reduction="none")

            def check(inputs, out):
                return err(np.asarray(out)[:CHECK_TOKENS], _lce64(*inputs, CHECK_TOKENS)[0])

            xla = functools.partial(h.jax_reference.linear_cross_entropy_xla, reduction="none")
            made.append(
                Point(
                    f"linear_cross_entropy/{tag}",
                    "loss",
                    "linear_cross_entropy",
                    dt,
                    (tokens, d, vocab),
                    make,
                    fwd,
                    {"xla": xla},
                    check,
                    unit,
                    nbytes,
                )
            )

            def step(x, w, y):
                loss, lse, dh = h.pallas.linear_cross_entropy(x, w, y)
                return loss, *h.pallas.linear_cross_entropy_backward(
                    x, w, y, loss, lse, dh, jnp.ones_like(loss)
                )

            def xla_step(x, w, y):
                loss, grads = jax.value_and_grad(h.jax_reference.linear_cross_entropy_xla, argnums=(0, 1))(
                    x, w, y
                )
                return loss, *grads

            def check_b(inputs, out):
                return err(np.asarray(out[1])[:CHECK_TOKENS], _lce64(*inputs, CHECK_TOKENS)[1])

            made.append(
                Point(
                    f"linear_cross_entropy_fwd_bwd/{tag}",
                    "loss",
                    "linear_cross_entropy_fwd_bwd",
                    dt,
                    (tokens, d, vocab),
                    make,
                    step,
                    {"xla": xla_step},
                    check_b,
                    3 * unit,
                    2 * nbytes,
                    {},
                    "forward + backward (mean loss), each side",
                )
            )
    return made


def grid(h: Any, *, quick: bool, statics: dict) -> list[Point]:
    """The runner's points of this family: shapes.CHIP in bf16 (quick: CHIP_QUICK)."""
    return points(h, list((h.shapes.CHIP_QUICK if quick else h.shapes.CHIP).values()), ("bf16",))


__all__ = ["CHECK_TOKENS", "SECTION", "grid", "points"]
