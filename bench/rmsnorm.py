"""RMSNorm: the Pallas kernel (which also returns the inverse RMS) and its Helion twin against torch."""

import torch
from _common import kernel_suite, randn

from tpu_kernels import bench


def _torch_rmsnorm(x, w, *, eps=1e-6):
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), w, eps)


def benchmarks(quick: bool, device_type: str) -> list[bench.Benchmark]:
    return kernel_suite(
        "rmsnorm",
        inputs=lambda p, dev: (
            randn(*p["shape"], dtype=p["dtype"], device=dev),
            randn(p["shape"][-1], dtype=p["dtype"], device=dev),
        ),
        reference=_torch_rmsnorm,  # torch's own fused op, not the family's three-op reference
        reduction=lambda p: p["shape"][-1],  # each row's mean of squares
        quick=quick,
        device_type=device_type,
    )
