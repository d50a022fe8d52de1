"""matmul's points in the chip runner (tpu_kernels/chip): the family's kernel against `jnp.dot` at
the grid's shapes, and the point any matmul-shaped kernel is timed as (templates, tuning
sweeps, drawn shapes)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from tpu_kernels.chip.point import Point, err, f64, itemsize, randn, reused

SECTION = "matmul"
CHECK_ROWS = 64  # rows of a matmul's output the host checks in float64


def _rows_of(m: int) -> np.ndarray:
    return np.unique(np.linspace(0, m - 1, min(m, CHECK_ROWS)).astype(int))


@reused
def _rows64(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`_rows_of`'s rows of a @ b in float64 (one sweep's candidates share a and b)."""
    return f64(a[_rows_of(a.shape[0])]) @ f64(b)


def point(
    fn: Callable,
    xla: dict,
    kernel: str,
    m: int,
    k: int,
    n: int,
    dt: str,
    statics: dict,
    section: str = "matmul",
    note: str = "",
) -> Point:
    """A matmul-shaped point of any kernel `fn(a, b)` (the family's, a template's, a tuning
    candidate's): the host checks CHECK_ROWS rows of the output against float64."""

    def make(rng):
        return randn(rng, (m, k), dt), randn(rng, (k, n), dt)

    def check(inputs, out):
        a, b = inputs
        return err(np.asarray(out)[_rows_of(m)], _rows64(a, b))

    return Point(
        f"{kernel}/{dt}[{m},{k},{n}]" + "".join(f"/{k_}={v}" for k_, v in sorted(statics.items())),
        section,
        kernel,
        dt,
        (m, k, n),
        make,
        functools.partial(fn, **statics),
        xla,
        check,
        2 * m * k * n,
        (m * k + k * n + m * n) * itemsize(dt),
        dict(statics),
        note,
    )


def points(h: Any, shapes, dtypes, statics: dict) -> list[Point]:
    """The family's matmul at (m, k, n) shapes against XLA's `jnp.dot` (its JAX reference)."""
    xla = {"xla": h.jax_reference.matmul_jax}
    return [
        point(h.pallas.matmul, xla, "matmul", m, k, n, dt, statics) for (m, k, n) in shapes for dt in dtypes
    ]


def grid(h: Any, *, quick: bool, statics: dict) -> list[Point]:
    """The runner's points of this family: bf16 and float32 at shapes.CHIP_BF16 and CHIP_F32,
    then the widths no default block divides (CHIP_RAGGED_*; quick: CHIP_QUICK_* alone)."""
    s = h.shapes
    if quick:
        return points(h, s.CHIP_QUICK_BF16, ("bf16",), statics) + points(
            h, s.CHIP_QUICK_F32, ("f32",), statics
        )
    return (
        points(h, s.CHIP_BF16, ("bf16",), statics)
        + points(h, s.CHIP_F32, ("f32",), statics)
        + points(h, s.CHIP_RAGGED_BF16, ("bf16",), statics)
        + points(h, s.CHIP_RAGGED_F32, ("f32",), statics)
    )


__all__ = ["CHECK_ROWS", "SECTION", "grid", "point", "points"]
