"""softmax's points in the chip runner (tpu_kernels/chip): the forward and backward at the grid's
[rows, d] shapes, and their float64 host references."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from tpu_kernels.chip.point import DTYPES, Point, err, f64, itemsize, randn, reused

SECTION = "rows"


@reused
def softmax64(x):
    x = f64(x)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@reused
def softmax_bwd64(y, dy):
    y, dy = f64(y), f64(dy)
    return y * (dy - np.sum(dy * y, axis=-1, keepdims=True))


def points(h: Any, shapes, dtypes, statics: dict) -> list[Point]:
    """softmax and its backward at [rows, d] shapes (logits of scale 3), against the family's JAX
    reference; the host checks them against float64."""
    p, ref = h.pallas, h.jax_reference
    made = []
    for rows, d in shapes:
        for dt in dtypes:
            n, it = rows * d, itemsize(dt)

            def make(rng, rows=rows, d=d, dt=dt):
                return (randn(rng, (rows, d), dt, 3.0),)

            def check(inputs, out):
                return err(out, softmax64(*inputs))

            made.append(
                Point(
                    f"softmax/{dt}[{rows},{d}]",
                    "rows",
                    "softmax",
                    dt,
                    (rows, d),
                    make,
                    functools.partial(p.softmax, **statics),
                    {"xla": ref.softmax_jax},
                    check,
                    5 * n,
                    2 * n * it,
                    dict(statics),
                )
            )

            def make_b(rng, rows=rows, d=d, dt=dt):
                y = softmax64(randn(rng, (rows, d), dt, 3.0)).astype(DTYPES[dt])
                return y, randn(rng, (rows, d), dt)

            def check_b(inputs, out):
                return err(out, softmax_bwd64(*inputs))

            made.append(
                Point(
                    f"softmax_backward/{dt}[{rows},{d}]",
                    "rows",
                    "softmax_backward",
                    dt,
                    (rows, d),
                    make_b,
                    functools.partial(p.softmax_backward, **statics),
                    {"xla": ref.softmax_backward_jax},
                    check_b,
                    4 * n,
                    3 * n * it,
                    dict(statics),
                )
            )
    return made


def grid(h: Any, *, quick: bool, statics: dict) -> list[Point]:
    """The runner's points of this family: shapes.CHIP (quick: CHIP_QUICK), bf16 and float32."""
    return points(h, h.shapes.CHIP_QUICK if quick else h.shapes.CHIP, ("bf16", "f32"), statics)


__all__ = ["SECTION", "grid", "points", "softmax64", "softmax_bwd64"]
