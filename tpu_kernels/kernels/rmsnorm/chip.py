"""rmsnorm's points in the chip runner (tpu_kernels/chip): the forward and backward at the grid's
[rows, d] shapes, and the float64 host references they are checked against."""

from __future__ import annotations

import functools
from typing import Any

import jax
import numpy as np

from tpu_kernels.chip.point import Point, err, f64, itemsize, randn, reused

SECTION = "rows"


@reused
def rmsnorm64(x, w, eps=1e-6):
    x, w = f64(x), f64(w)
    r = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return x * r * w, r


@reused
def rmsnorm_bwd64(x, w, r, dy):
    x, w, r, dy = map(f64, (x, w, r, dy))
    xhat, g = x * r, dy * w
    dx = r * (g - xhat * np.mean(g * xhat, axis=-1, keepdims=True))
    return dx, np.sum(dy * xhat, axis=0)


def points(h: Any, shapes, dtypes, statics: dict) -> list[Point]:
    """rmsnorm and its backward at [rows, d] shapes, against the family's JAX reference under jit;
    the host checks y (and dx, dw) against float64."""
    p, ref = h.pallas, h.jax_reference
    made = []
    for rows, d in shapes:
        for dt in dtypes:
            n, it = rows * d, itemsize(dt)
            fwd = functools.partial(p.rmsnorm, **statics)

            def make(rng, rows=rows, d=d, dt=dt):
                return randn(rng, (rows, d), dt), randn(rng, (d,), dt)

            def check(inputs, out):
                return err(out[0], rmsnorm64(*inputs)[0])

            made.append(
                Point(
                    f"rmsnorm/{dt}[{rows},{d}]",
                    "rows",
                    "rmsnorm",
                    dt,
                    (rows, d),
                    make,
                    fwd,
                    {"xla": jax.jit(functools.partial(ref.rmsnorm_jax))},
                    check,
                    4 * n,
                    2 * n * it + 4 * rows,
                    dict(statics),
                )
            )
            bwd = functools.partial(p.rmsnorm_backward, **statics)

            def make_b(rng, rows=rows, d=d, dt=dt):
                x, w = randn(rng, (rows, d), dt), randn(rng, (d,), dt)
                r = rmsnorm64(x, w)[1].astype(np.float32)
                return x, w, r, randn(rng, (rows, d), dt)

            def check_b(inputs, out):
                dx, dw = rmsnorm_bwd64(*inputs)
                return max(err(out[0], dx), err(out[1], dw))

            made.append(
                Point(
                    f"rmsnorm_backward/{dt}[{rows},{d}]",
                    "rows",
                    "rmsnorm_backward",
                    dt,
                    (rows, d),
                    make_b,
                    bwd,
                    {"xla": ref.rmsnorm_backward_jax},
                    check_b,
                    8 * n,
                    3 * n * it + 4 * rows,
                    dict(statics),
                )
            )
    return made


def grid(h: Any, *, quick: bool, statics: dict) -> list[Point]:
    """The runner's points of this family: shapes.CHIP (quick: CHIP_QUICK), bf16 and float32."""
    return points(h, h.shapes.CHIP_QUICK if quick else h.shapes.CHIP, ("bf16", "f32"), statics)


__all__ = ["SECTION", "grid", "points", "rmsnorm64", "rmsnorm_bwd64"]
