"""Declaring a benchmark: a sweep of points, inputs per point, candidates, a reference.

A *point* is one combination of parameters (a dict, e.g. {"shape": (1024, 1024),
"dtype": torch.bfloat16}). At each point every *candidate* (the op under test and
its baselines) is timed on the same inputs and checked against a float64
reference.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

Point = Mapping[str, Any]


@dataclass
class Candidate:
    """One implementation timed at a point.

    `fn(*args)` is timed, where args = `prepare(inputs)` (default: the inputs
    themselves); `prepare` runs once per input set, outside the timed region (the
    raw-JAX baseline converts tensors to arrays there). `to_torch` turns its
    output into a tensor for the correctness check.
    """

    name: str
    fn: Callable[..., Any]
    prepare: Callable[[tuple], tuple] | None = None
    to_torch: Callable[[Any], torch.Tensor] | None = None
    implementation: str | None = None  # e.g. which Tokamax implementation ran
    primary: bool = False  # the op under test: a wrong result makes the run fail


@dataclass
class Benchmark:
    """A benchmark: what to run at which points, and how to judge it."""

    name: str
    points: Sequence[Point]
    inputs: Callable[[Point, torch.device], tuple]
    candidates: Callable[[Point], list[Candidate]]
    reference: Callable[..., torch.Tensor] | None = None  # called on float64 copies of the inputs
    reference_kwargs: Callable[[Point], dict] = lambda p: {}
    flops: Callable[[Point], float] | None = None
    bytes: Callable[[Point], float] | None = None
    cost_fn: Callable[[Point], tuple[float, float, str] | None] | None = None  # (flops, bytes, source)
    # Correctness (bench.correctness, docs/benchmarking.md "Correctness"): the length of the
    # longest reduction behind one output element (K for a matmul, the row for a softmax; default:
    # the inputs' largest dimension), and a factor on the allowed error for results that may
    # legitimately be less accurate than their dtype's roundings (ill-conditioned inputs, an
    # approximation the kernel makes on purpose).
    reduction: Callable[[Point], int] | None = None
    tolerance_scale: Callable[[Point], float] = lambda p: 1.0
    baseline: str = "torch"  # speed-ups are against this candidate
    quick_points: Sequence[Point] | None = None  # `--quick`
    # the default on a device whose kernels run slowly (`DeviceSpec.bench_sweep`, a CPU: the
    # interpreter); None: `points`
    reduced_points: Sequence[Point] | None = None
    description: str = ""
    tags: dict[str, str] = field(default_factory=dict)

    def sweep(self, quick: bool = False, *, reduced: bool = False) -> Sequence[Point]:
        """The points of a `--quick` run, of a reduced one, or of a full one (`points`)."""
        if quick and self.quick_points is not None:
            return self.quick_points
        if reduced and self.reduced_points is not None:
            return self.reduced_points
        return self.points


SWEEPS = ("quick", "reduced", "full")
"""What a run times: `quick_points`, `reduced_points` or `points` of each benchmark."""


def grid(**axes: Sequence[Any]) -> list[dict[str, Any]]:
    """The cartesian product of parameter axes: grid(shape=[...], dtype=[...])."""
    names = list(axes)
    return [dict(zip(names, values)) for values in itertools.product(*(axes[n] for n in names))]


def point_id(point: Point) -> str:
    """A stable, readable id: 'shape=1024x1024,dtype=bfloat16'."""
    return ",".join(f"{k}={format_value(v)}" for k, v in point.items())


def format_value(v: Any) -> str:
    if isinstance(v, torch.dtype):
        return str(v).removeprefix("torch.")
    if isinstance(v, (tuple, list)):
        if any(isinstance(x, (tuple, list)) for x in v):  # several shapes: keep them apart
            return "(" + ", ".join(format_value(x) for x in v) + ")"
        return "x".join(format_value(x) for x in v)
    return str(v)


def jsonable(point: Point) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in point.items():
        if isinstance(v, torch.dtype):
            out[k] = str(v).removeprefix("torch.")
        elif isinstance(v, tuple):
            out[k] = list(v)
        else:
            out[k] = v
    return out
