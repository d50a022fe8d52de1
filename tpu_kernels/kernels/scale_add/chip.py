"""scale_add's points in the chip runner (tpu_kernels/chip): x + alpha * y and its gradient at the
grid's [rows, d] shapes."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax

from tpu_kernels.chip.point import Point, err, f64, itemsize, randn, two

SECTION = "rows"


def points(h: Any, shapes, dtypes, statics: dict) -> list[Point]:
    """x + 0.5 y and its gradient for y (as jax.vjp derives it) at [rows, d] shapes, against the
    family's JAX reference; the host checks them against float64."""
    made = []
    for rows, d in shapes:
        for dt in dtypes:
            n, it = rows * d, itemsize(dt)

            def check(inputs, out):
                x, y = map(f64, inputs)
                return err(out, x + 0.5 * y)

            made.append(
                Point(
                    f"scale_add/{dt}[{rows},{d}]",
                    "rows",
                    "scale_add",
                    dt,
                    (rows, d),
                    two(rows, d, dt),
                    functools.partial(h.pallas.scale_add, alpha=0.5, **statics),
                    {"xla": functools.partial(h.jax_reference.scale_add_jax, alpha=0.5)},
                    check,
                    2 * n,
                    3 * n * it,
                    dict(statics),
                )
            )

            def make_b(rng, rows=rows, d=d, dt=dt):
                return (randn(rng, (rows, d), dt),)

            def check_b(inputs, out):
                return err(out, 0.5 * f64(inputs[0]))

            made.append(
                Point(
                    f"scale_add_backward/{dt}[{rows},{d}]",
                    "rows",
                    "scale_add_backward",
                    dt,
                    (rows, d),
                    make_b,
                    dy(functools.partial(h.pallas.scale_add, alpha=0.5, **statics)),
                    {"xla": dy(functools.partial(h.jax_reference.scale_add_jax, alpha=0.5))},
                    check_b,
                    n,
                    2 * n * it,
                    dict(statics),
                )
            )
    return made


def dy(fn: Callable) -> Callable:
    """d/dy of fn(x, y) at the incoming gradient g, as JAX derives it (jax.vjp: what the torch
    op's backward runs). d/dx is g itself. The primals are g too: the op is linear, so their
    values do not matter, and the forward they feed is dead code that jit drops (its lowering
    holds the backward's kernel alone)."""

    def run(g):
        return jax.vjp(fn, g, g)[1](g)[1]

    return run


def grid(h: Any, *, quick: bool, statics: dict) -> list[Point]:
    """The runner's points of this family: shapes.CHIP (quick: CHIP_QUICK), bf16 and float32."""
    return points(h, h.shapes.CHIP_QUICK if quick else h.shapes.CHIP, ("bf16", "f32"), statics)


__all__ = ["SECTION", "dy", "grid", "points"]
