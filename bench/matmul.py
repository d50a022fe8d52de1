"""Tiled matmul: the Pallas kernel (float32 accumulator) and its Helion twin against torch.matmul."""

import math

import torch
from _common import FLOATS, randn

from tpu_kernels import bench
from tpu_kernels.kernels import matmul
from tpu_kernels.kernels.matmul import shapes
from tpu_kernels.testing import dot_scale


def _helion(p):
    """The Helion twin of the kernel (CPU: Helion's Pallas backend in interpret mode)."""
    from tpu_kernels.kernels.helion_ops import matmul_helion

    return [bench.Candidate("helion", lambda a, b: matmul_helion(a, b))]


def benchmarks(quick: bool, device_type: str) -> list[bench.Benchmark]:
    points = bench.grid(mkn=list(shapes.BENCH.values()), dtype=FLOATS)
    return [
        bench.kernel_benchmark(
            "matmul",
            matmul,
            inputs=lambda p, dev: (
                randn(p["mkn"][0], p["mkn"][1], dtype=p["dtype"], device=dev),
                randn(p["mkn"][1], p["mkn"][2], dtype=p["dtype"], device=dev),
            ),
            points=points,
            quick_points=bench.grid(mkn=[shapes.BENCH["512"]], dtype=FLOATS),
            reference=torch.matmul,
            tolerance_scale=lambda p: dot_scale(p["mkn"][1], p["dtype"]),
            flops=lambda p: 2 * math.prod(p["mkn"]),
            extra=_helion,
            quick=quick,
            device_type=device_type,
        )
    ]
