"""Shared by the suites: fresh random inputs (never zeros), the sweep axes, and the one
benchmark each shipped kernel family declares (the kernel, its Helion twin, torch)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

import torch

from tpu_kernels import bench

FLOATS = [torch.float32, torch.bfloat16]


def randn(*shape: int, dtype: torch.dtype, device: torch.device, scale: float = 1.0) -> torch.Tensor:
    """Standard-normal values drawn in float32 and rounded to `dtype`, on `device`."""
    return (torch.randn(*shape, device=device) * scale).to(dtype)


def _family(family: str, module: str = "") -> Any:
    """`tpu_kernels.kernels.<family>` or one of its modules."""
    return importlib.import_module(f"tpu_kernels.kernels.{family}{module and '.' + module}")


def _helion_twin(
    family: str, name: str, kwargs: Mapping[str, Any]
) -> Callable[[dict], list[bench.Candidate]]:
    """The candidate for the op `name` of `tpu_kernels.kernels.<family>.helion` (CPU: Helion's
    Pallas backend in interpret mode), called with `kwargs`. Imported at the first point:
    Helion's import is only paid by the runs that time it."""

    def extra(p: dict) -> list[bench.Candidate]:
        fn = getattr(_family(family, "helion"), name)
        return [bench.Candidate("helion", lambda *xs: fn(*xs, **kwargs))]

    return extra


def kernel_suite(
    family: str,
    *,
    quick: bool,
    device_type: str,
    op: str | None = None,
    helion: str | None = None,
    axis: str = "shape",
    point: Callable[[Any], Any] = lambda shape: shape,
    kwargs: Mapping[str, Any] | None = None,
    **options: Any,
) -> list[bench.Benchmark]:
    """The suite of the shipped family `tpu_kernels.kernels.<family>`, all but its inputs
    derived from the family's folder: the benchmark `op` (default: the family's name), the
    op `<family>.<op>` over `shapes.BENCH` (its values, through `point`, under the point key
    `axis`) x FLOATS, or with --quick the one size `shapes.BENCH[shapes.QUICK]`; beside torch
    (`reference`, default `<family>.reference.<op>`) and the Helion twin in `<family>/helion.py`
    (`helion`, default `<op>_helion`). `kwargs` go to every call (the op, the reference, the
    twin); `options` (inputs, tolerance_scale, flops, ...) to `bench.kernel_benchmark`."""
    op = op or family
    shapes = _family(family, "shapes")
    kwargs = dict(kwargs or {})
    if "reference" not in options:
        options["reference"] = getattr(_family(family, "reference"), op)
    return [
        bench.kernel_benchmark(
            op,
            getattr(_family(family), op),
            points=bench.grid(**{axis: [point(s) for s in shapes.BENCH.values()]}, dtype=FLOATS),
            quick_points=bench.grid(**{axis: [point(shapes.BENCH[shapes.QUICK])]}, dtype=FLOATS),
            statics=lambda p: kwargs,
            reference_kwargs=lambda p: kwargs,
            extra=_helion_twin(family, helion or f"{op}_helion", kwargs),
            quick=quick,
            device_type=device_type,
            **options,
        )
    ]
