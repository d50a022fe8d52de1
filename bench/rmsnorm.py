"""RMSNorm: the Pallas kernel (which also returns the inverse RMS) and its Helion twin against torch."""

import torch
from _common import helion_twin, kernel_suite, randn

from tpu_kernels import bench
from tpu_kernels.kernels import rmsnorm
from tpu_kernels.kernels.rmsnorm import shapes


def _torch_rmsnorm(x, w, *, eps=1e-6):
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), w, eps)


def benchmarks(quick: bool, device_type: str) -> list[bench.Benchmark]:
    return kernel_suite(
        "rmsnorm",
        rmsnorm,
        axis="shape",
        sizes=shapes.BENCH.values(),
        quick_size=shapes.BENCH["4kx1k"],
        helion=helion_twin("rmsnorm_helion"),
        inputs=lambda p, dev: (
            randn(*p["shape"], dtype=p["dtype"], device=dev),
            randn(p["shape"][-1], dtype=p["dtype"], device=dev),
        ),
        reference=_torch_rmsnorm,
        tolerance_scale=lambda p: 3.0,
        quick=quick,
        device_type=device_type,
    )
