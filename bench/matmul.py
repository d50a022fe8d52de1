"""Tiled matmul: the Pallas kernel (float32 accumulator) and its Helion twin against torch.matmul."""

import math

from _common import kernel_suite, randn

from tpu_kernels import bench
from tpu_kernels.testing import dot_scale


def benchmarks(quick: bool, device_type: str) -> list[bench.Benchmark]:
    return kernel_suite(
        "matmul",
        axis="mkn",
        inputs=lambda p, dev: (
            randn(p["mkn"][0], p["mkn"][1], dtype=p["dtype"], device=dev),
            randn(p["mkn"][1], p["mkn"][2], dtype=p["dtype"], device=dev),
        ),
        tolerance_scale=lambda p: dot_scale(p["mkn"][1], p["dtype"]),
        flops=lambda p: 2 * math.prod(p["mkn"]),
        quick=quick,
        device_type=device_type,
    )
