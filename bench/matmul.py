"""Tiled matmul: the Pallas kernel (float32 accumulator) and its Helion twin against torch.matmul."""

import math

from _common import kernel_suite, randn

from tpu_kernels import bench


def benchmarks(quick: bool, device_type: str) -> list[bench.Benchmark]:
    return kernel_suite(
        "matmul",
        axis="mkn",
        inputs=lambda p, dev: (
            randn(p["mkn"][0], p["mkn"][1], dtype=p["dtype"], device=dev),
            randn(p["mkn"][1], p["mkn"][2], dtype=p["dtype"], device=dev),
        ),
        reduction=lambda p: p["mkn"][1],  # K-long dot products
        flops=lambda p: 2 * math.prod(p["mkn"]),
        quick=quick,
        device_type=device_type,
    )
