"""CUDA: the JAX kernel runs on JAX's GPU backend, ordered with torch's current stream.

Needs a CUDA build of jaxlib (`pip install "jax[cuda13]"`); without it the
first call raises BackendUnavailableError. Pallas kernels written for TPU do
not compile for GPUs: a kernel meant to run here is a JAX function or a Pallas
GPU (Triton / Mosaic GPU) kernel.

Peaks for the benchmark's roofline (`PEAKS`, matched in the name torch gives the GPU):
dense (no sparsity) figures from NVIDIA's data sheets. Another GPU has no roofline
until its row is added here.

| name contains | bf16 TFLOP/s | HBM GB/s | source |
|---|---|---|---|
| `H100` | 989 | 3350 | NVIDIA H100 SXM data sheet |
| `H200` | 989 | 4800 | NVIDIA H200 SXM data sheet |
"""

from __future__ import annotations

import contextlib
from typing import Any

import jax
import torch

from tpu_kernels.errors import BackendUnavailableError
from tpu_kernels.runtime import bridge, devices
from tpu_kernels.runtime.devices import jax_exec


def _check_backend() -> None:
    try:
        jax.devices("cuda")
    except RuntimeError as e:
        raise BackendUnavailableError(
            "CUDA tensors need JAX's CUDA backend, which is not available: "
            f"{e}. Install it with: pip install 'jax[cuda13]'."
        ) from e


def unavailable_reason() -> str | None:
    """Why CUDA tensors cannot reach JAX's CUDA backend in this process, in words (None: they
    can): torch sees no CUDA device, or JAX has no CUDA backend (a CPU-only jaxlib, no CUDA
    plugin, JAX_PLATFORMS leaving it out, or a plugin that failed to start). scripts/gpu-check's
    preflight and tests/cuda ask this."""
    if not torch.cuda.is_available():
        return "torch sees no CUDA device (torch.cuda.is_available() is False)"
    try:
        jax.devices("cuda")
    except RuntimeError as e:
        return f"JAX has no CUDA backend: jax.devices('cuda') raised {str(e).splitlines()[0]}"
    return None


class CudaTransfer:
    device_type = "cuda"

    def __init__(self) -> None:
        self._checked = False

    def to_jax(self, t: torch.Tensor) -> jax.Array:
        if not self._checked:
            _check_backend()
            self._checked = True
        return bridge.to_jax_cuda(t)

    def to_torch(self, a: jax.Array) -> torch.Tensor:
        return bridge.to_torch_cuda(a)

    def mode(self) -> Any:
        return None

    def trace_context(self, mode: Any) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def recover(self, mode: Any) -> None:
        pass

    def sharding(self) -> None:
        return None  # one route (DLPack), and the tensors' own GPU decides the device


TRANSFER = CudaTransfer()

PEAKS = {
    "H100": devices.Peaks(989e12, 3.35e12, "NVIDIA H100 SXM data sheet (dense bf16)"),
    "H200": devices.Peaks(989e12, 4.8e12, "NVIDIA H200 SXM data sheet (dense bf16)"),
}


def peaks(name: str) -> devices.Peaks | None:
    """The peaks of the GPU torch names `name` ("NVIDIA H100 80GB HBM3"), if `PEAKS` has it."""
    for key, value in PEAKS.items():
        if key in name:
            return value
    return None


def _describe() -> tuple[str, torch.device]:
    if not torch.cuda.is_available():
        raise RuntimeError("--device cuda, but torch sees no CUDA device.")
    return torch.cuda.get_device_name(), torch.device("cuda", torch.cuda.current_device())


SPEC = devices.register(
    devices.DeviceSpec(
        name="cuda",
        dispatch_key="CUDA",
        jax_kernel=lambda spec, body: jax_exec.for_op(spec, body, TRANSFER),
        available=torch.cuda.is_available,
        synchronize=lambda: torch.accelerator.synchronize(),
        # CUDA events time the device; a JAX result (its own stream) falls back to wall time
        clock="cuda_events",
        describe=_describe,
        peaks=peaks,
    )
)
