"""Shared by the suites: fresh random inputs (never zeros), the sweep axes, and the one
benchmark each shipped kernel suite declares (the kernel, its Helion twin, torch)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from tpu_kernels import bench

FLOATS = [torch.float32, torch.bfloat16]


def randn(*shape: int, dtype: torch.dtype, device: torch.device, scale: float = 1.0) -> torch.Tensor:
    """Standard-normal values drawn in float32 and rounded to `dtype`, on `device`."""
    return (torch.randn(*shape, device=device) * scale).to(dtype)


def helion_twin(name: str, **statics: Any) -> Callable[[dict], list[bench.Candidate]]:
    """The candidate for `tpu_kernels.kernels.helion_ops.<name>`, the kernel's Helion twin
    (CPU: Helion's Pallas backend in interpret mode), called with `statics` as keywords.
    Imported at the first point: Helion's import is only paid by the runs that time it."""

    def extra(p: dict) -> list[bench.Candidate]:
        from tpu_kernels.kernels import helion_ops

        fn = getattr(helion_ops, name)
        return [bench.Candidate("helion", lambda *xs: fn(*xs, **statics))]

    return extra


def kernel_suite(
    name: str,
    op: Any,
    *,
    axis: str,
    sizes: Sequence[Any],
    quick_size: Any,
    helion: Callable[[dict], list[bench.Candidate]],
    quick: bool,
    device_type: str,
    **options: Any,
) -> list[bench.Benchmark]:
    """A shipped kernel's suite: `op` over `sizes` (the point key `axis`) x FLOATS (one
    size, `quick_size`, with --quick), beside torch and `helion` (a `helion_twin`);
    `options` (inputs, reference, tolerance_scale, ...) go to `bench.kernel_benchmark`."""
    return [
        bench.kernel_benchmark(
            name,
            op,
            points=bench.grid(**{axis: list(sizes)}, dtype=FLOATS),
            quick_points=bench.grid(**{axis: [quick_size]}, dtype=FLOATS),
            extra=helion,
            quick=quick,
            device_type=device_type,
            **options,
        )
    ]
