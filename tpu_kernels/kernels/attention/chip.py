"""The attention family's points in the chip runner (tpu_kernels/chip): causal, grouped kv heads
read in place, forward and forward + backward, against XLA's attention and JAX's flash
attention with k and v repeated."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from tpu_kernels.chip.point import (
    Point,
    attention64,
    attention_bwd64,
    err,
    grad_of,
    itemsize,
    jax_flash,
    randn,
    repeated,
)

SECTION = "attention"


def points(h: Any, shapes, dtypes, statics: dict | None = None) -> list[Point]:
    """The shipped attention family (grouped kv heads read in place), causal: the forward
    (`attention_out`, the output alone) and forward + backward, against XLA's attention
    (grouped natively) and JAX's flash attention with k and v repeated where a 512-, 256- or
    128-block divides the sequence. The host checks head 0's output, and its dq, in float64."""
    made = []
    for b, hds, hk, s, _, d in shapes:
        group, scale = hds // hk, 1.0 / np.sqrt(d)
        for dt in dtypes:
            tag = f"{dt}[{b},{hds},{hk},{s},{d}]/causal"
            flops = 4 * b * hds * s * s * d * 0.5
            nbytes = 2 * b * (hds + hk) * s * d * itemsize(dt)
            block = next((x for x in (512, 256, 128) if s % x == 0), None)
            fwd_xla = {"xla": functools.partial(h.jax_reference.attention_xla, causal=True, scale=scale)}
            if block:
                fwd_xla["jax_flash"] = repeated(jax_flash(True, scale, block), group)

            def fwd(q, k, v):
                return h.pallas.attention_out(q, k, v, causal=True)

            def make(rng, b=b, hds=hds, hk=hk, s=s, d=d, dt=dt):
                return randn(rng, (b, hds, s, d), dt), *(randn(rng, (b, hk, s, d), dt) for _ in range(2))

            def check(inputs, out, scale=scale):
                q, k, v = (a[0, 0] for a in inputs)
                return err(np.asarray(out)[0, 0], attention64(q, k, v, True, scale)[0])

            made.append(
                Point(
                    f"attention/{tag}",
                    "attention",
                    "attention",
                    dt,
                    (b, hds, hk, s, d),
                    make,
                    fwd,
                    fwd_xla,
                    check,
                    flops,
                    nbytes,
                    {"causal": True},
                )
            )

            def grad(q, k, v, do):
                out, lse = h.pallas.attention(q, k, v, causal=True)
                return h.pallas.attention_backward(q, k, v, out, lse, do, causal=True)

            def make_b(rng, b=b, hds=hds, hk=hk, s=s, d=d, dt=dt):
                q, k, v = make(rng, b, hds, hk, s, d, dt)
                return q, k, v, randn(rng, (b, hds, s, d), dt)

            def check_b(inputs, out, scale=scale):
                q, k, v, do = (a[0, 0] for a in inputs)
                return err(np.asarray(out[0])[0, 0], attention_bwd64(q, k, v, do, True, scale)[0])

            made.append(
                Point(
                    f"attention_fwd_bwd/{tag}",
                    "attention",
                    "attention_fwd_bwd",
                    dt,
                    (b, hds, hk, s, d),
                    make_b,
                    grad,
                    {n: grad_of(f) for n, f in fwd_xla.items()},
                    check_b,
                    3.5 * flops,
                    2 * nbytes,
                    {"causal": True},
                    "forward + backward, each side",
                )
            )
    return made


def grid(h: Any, *, quick: bool, statics: dict) -> list[Point]:
    """The runner's points of this family: shapes.CHIP in bf16, its first shape in float32
    (quick: CHIP_QUICK)."""
    shapes = list((h.shapes.CHIP_QUICK if quick else h.shapes.CHIP).values())
    return points(h, shapes, ("bf16",)) + points(h, shapes[:1], ("f32",))


__all__ = ["SECTION", "grid", "points"]
