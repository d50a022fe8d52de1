"""scripts/gpu-check's benchmark suite: ops with plain JAX bodies on CUDA tensors, beside torch.

    python -m tpu_kernels bench scripts/gpu_check/cuda_suite.py --quick --device cuda

The shipped Pallas kernels are TPU kernels and do not lower for GPUs (docs/devices.md), so
what this times on CUDA is the path every JAX-bodied op takes there: DLPack in, XLA's GPU
executable, DLPack out. Its bodies are two shipped families' JAX references (softmax, and
matmul with a float32 accumulator); the candidates are the op (`tpu_kernels`), torch's own op
(`torch`) and the same jitted function on JAX arrays (`jax`: the difference to `tpu_kernels` is
what the torch bridge costs), and each family's Helion twin (Triton) where Helion is installed.
Times are CUDA events on torch's stream for torch results, wall clock for JAX results
(tpu_kernels/bench/timing.py).

On CUDA the sizes are 4096 (softmax 4096x4096, matmul 4096^3); on any other device 256, which
is what the CPU test of this suite (tests/test_gpu_check.py) runs.
"""

from __future__ import annotations

import importlib
import math

import torch

from tpu_kernels import bench, tpu_kernel
from tpu_kernels.kernels.matmul import reference as matmul_ref
from tpu_kernels.kernels.softmax import reference as softmax_ref

softmax_xla = tpu_kernel("gpu_check::softmax_xla")(softmax_ref.softmax_jax)
matmul_xla = tpu_kernel("gpu_check::matmul_xla")(matmul_ref.matmul_jax)

DTYPES = [torch.float32, torch.bfloat16]


def size(device_type: str) -> int:
    return 4096 if device_type == "cuda" else 256


def _randn(*shape: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return torch.randn(*shape, device=device).to(dtype)


def _helion(family: str, name: str):
    """The family's Helion twin as an extra candidate, or none where Helion does not import
    (absent, or a release that needs a newer torch: helion 1.5.1 on torch 2.11)."""
    try:
        importlib.import_module("helion")
    except ImportError:
        return None

    def extra(p: dict) -> list[bench.Candidate]:
        fn = getattr(importlib.import_module(f"tpu_kernels.kernels.{family}.helion"), name)
        return [bench.Candidate("helion", fn)]

    return extra


def benchmarks(quick: bool, device_type: str) -> list[bench.Benchmark]:
    n = size(device_type)
    softmax_points = bench.grid(shape=[(n, n)], dtype=DTYPES)
    matmul_points = bench.grid(mkn=[(n, n, n)], dtype=DTYPES)
    return [
        bench.kernel_benchmark(
            "softmax_xla",
            softmax_xla,
            inputs=lambda p, dev: (_randn(*p["shape"], dtype=p["dtype"], device=dev) * 3,),
            points=softmax_points,
            quick_points=softmax_points,
            reference=softmax_ref.softmax,
            reduction=lambda p: p["shape"][-1],  # each row's max and sum
            extra=_helion("softmax", "softmax_helion"),
            quick=quick,
            device_type=device_type,
            description="softmax with an XLA body (the family's JAX reference)",
        ),
        bench.kernel_benchmark(
            "matmul_xla",
            matmul_xla,
            inputs=lambda p, dev: (
                _randn(p["mkn"][0], p["mkn"][1], dtype=p["dtype"], device=dev),
                _randn(p["mkn"][1], p["mkn"][2], dtype=p["dtype"], device=dev),
            ),
            points=matmul_points,
            quick_points=matmul_points,
            reference=matmul_ref.matmul,
            reduction=lambda p: p["mkn"][1],  # K-long dot products
            flops=lambda p: 2 * math.prod(p["mkn"]),
            extra=_helion("matmul", "matmul_helion"),
            quick=quick,
            device_type=device_type,
            description="matmul with an XLA body (jnp.matmul, float32 accumulation)",
        ),
    ]
