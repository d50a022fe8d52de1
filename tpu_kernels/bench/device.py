"""The device a benchmark runs on: how to synchronise with it, and its peaks.

Each device's policy (clock, synchronisation, raw-JAX baseline, device time) is in
its registration (tpu_kernels.runtime.devices), its peaks too (read through bench/roofline.py).

- CPU: results are ready when returned (tpu_kernels and torch); JAX arrays are
  blocked on. Roofline figures are not meaningful (interpret mode).
- CUDA: CUDA events on torch's current stream for torch results; JAX results
  are blocked on (JAX runs on its own stream).
- TPU (torch_tpu): `torch.accelerator.synchronize()`; JAX results blocked on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import torch

from tpu_kernels.bench import roofline
from tpu_kernels.runtime import devices


@dataclass(frozen=True)
class Device:
    type: str  # "cpu", "cuda", "tpu"
    name: str  # e.g. "TPU v6e", "NVIDIA H100 80GB HBM3", the CPU model
    torch_device: torch.device
    peaks: roofline.Peaks | None  # None where a roofline is not meaningful

    def synchronize(self, out: Any = None) -> None:
        """Wait until `out` (any pytree of tensors / JAX arrays) and all queued work are done."""
        for leaf in jax.tree_util.tree_leaves(out):
            if isinstance(leaf, jax.Array):
                leaf.block_until_ready()
        devices.get(self.type).synchronize()

    def to_dict(self) -> dict:
        return {"type": self.type, "name": self.name, "peaks": self.peaks.to_dict() if self.peaks else None}


def default_device_type() -> str:
    if torch.accelerator.is_available():
        acc = torch.accelerator.current_accelerator()
        if acc is not None:
            return acc.type
    return "cpu"


def resolve(requested: str | None = None) -> Device:
    """The device to benchmark on: `requested` ("cpu", "cuda", "tpu") or the default accelerator."""
    kind = requested or default_device_type()
    try:
        spec = devices.get(kind)
    except KeyError:
        known = ", ".join(d.name for d in devices.all_devices())
        raise ValueError(f"tpu-kernels bench: unknown device {kind!r}; use {known}.") from None
    try:
        name, torch_device = spec.describe()
    except RuntimeError as e:
        raise RuntimeError(f"tpu-kernels bench: {e}") from e
    return Device(spec.name, name, torch_device, roofline.peaks(spec.name, name))


def last_level_cache_bytes() -> int:
    """The CPU's largest cache (Linux sysfs), or 32 MiB when unknown."""
    best = 0
    import glob

    for path in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/size"):
        try:
            text = open(path).read().strip()
        except OSError:
            continue
        units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
        value = int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)
        best = max(best, value)
    return best or 32 << 20
