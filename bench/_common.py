"""Shared by the suites: fresh random inputs (never zeros), the sweep axes, the one
benchmark each registered kernel family gets (the kernel, its Helion twin, torch), and the
scripts' plain per-call timer."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from tpu_kernels import bench
from tpu_kernels.kernels.registry import Family

FLOATS = [torch.float32, torch.bfloat16]


def per_call_us(fn: Callable[[], object], calls: int) -> float:
    """`fn()` `calls` times in a row: microseconds per call (bench/overhead.py, dispatch_modes.py)."""
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls * 1e6


def randn(*shape: int, dtype: torch.dtype, device: torch.device, scale: float = 1.0) -> torch.Tensor:
    """Standard-normal values drawn in float32 and rounded to `dtype`, on `device`."""
    return (torch.randn(*shape, device=device) * scale).to(dtype)


def _helion_twin(family: Family) -> Callable[[dict], list[bench.Candidate]]:
    """The candidate for the family's Helion twin (CPU: Helion's Pallas backend in interpret
    mode), called with the family's kwargs. Imported at the first point: Helion's import is
    only paid by the runs that time it."""

    def extra(p: dict) -> list[bench.Candidate]:
        fn = family.helion_op()
        return [bench.Candidate("helion", lambda *xs: fn(*xs, **family.kwargs))]

    return extra


def kernel_suite(family: Family, *, quick: bool, device_type: str) -> list[bench.Benchmark]:
    """The benchmark of a registered kernel family (tpu_kernels.kernels.FAMILIES), everything
    read from its registration: named as its op, the op over `shapes.BENCH` (under the point
    key "shape") x FLOATS (on a CPU by default the sizes `shapes.REDUCED` names), or with
    --quick the one size `shapes.BENCH[shapes.QUICK]`, on the family's `inputs`; beside torch (its `baseline`, default the reference `reference.<op>`)
    and its Helion twin, if it has one. The family's `kwargs` go to every call (the op, the
    reference, the twin); its `reduction` and `flops` take the point's shape."""
    kwargs = dict(family.kwargs)
    return [
        bench.kernel_benchmark(
            family.op.short_name,
            family.op,
            inputs=lambda p, dev: family.inputs(p["shape"], p["dtype"], dev),
            points=bench.grid(shape=list(family.shapes.BENCH.values()), dtype=FLOATS),
            quick_points=bench.grid(shape=[family.quick_shape()], dtype=FLOATS),
            reduced_points=bench.grid(shape=family.reduced_shapes(), dtype=FLOATS),
            reference=family.baseline or family.torch_reference,
            statics=lambda p: kwargs,
            reference_kwargs=lambda p: kwargs,
            extra=_helion_twin(family) if family.helion else None,
            reduction=lambda p: family.reduction(p["shape"]),
            flops=(lambda p: family.flops(p["shape"])) if family.flops else None,
            quick=quick,
            device_type=device_type,
        )
    ]
