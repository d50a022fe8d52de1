"""RMSNorm: the Pallas kernel (which also returns the inverse RMS) and its Helion twin against torch."""

import torch
from _common import FLOATS, randn

from tpu_kernels import bench
from tpu_kernels.kernels import rmsnorm
from tpu_kernels.kernels.rmsnorm import shapes


def _torch_rmsnorm(x, w, *, eps=1e-6):
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), w, eps)


def _helion(p):
    """The Helion twin of the kernel (CPU: Helion's Pallas backend in interpret mode)."""
    from tpu_kernels.kernels.helion_ops import rmsnorm_helion

    return [bench.Candidate("helion", lambda x, w: rmsnorm_helion(x, w))]


def benchmarks(quick: bool, device_type: str) -> list[bench.Benchmark]:
    points = bench.grid(shape=list(shapes.BENCH.values()), dtype=FLOATS)
    return [
        bench.kernel_benchmark(
            "rmsnorm",
            rmsnorm,
            inputs=lambda p, dev: (
                randn(*p["shape"], dtype=p["dtype"], device=dev),
                randn(p["shape"][-1], dtype=p["dtype"], device=dev),
            ),
            points=points,
            quick_points=bench.grid(shape=[shapes.BENCH["4kx1k"]], dtype=FLOATS),
            reference=_torch_rmsnorm,
            tolerance_scale=lambda p: 3.0,
            extra=_helion,
            quick=quick,
            device_type=device_type,
        )
    ]
