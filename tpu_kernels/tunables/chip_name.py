"""The chip a call runs on, as tuning tables name it: "cpu", "cuda:<GPU name>", or a TPU
generation by JAX's short name ("v5e", "v6e", "7x", ...).

A TPU's generation is read, in order, from `TPU_KERNELS_CHIP` (an override, e.g. for a
machine whose runtime names its chip in another way), from JAX when JAX itself sees the TPU,
and from `TPU_ACCELERATOR_TYPE`, which Cloud TPU VMs set ("v6e-8", "v5litepod-16"); when none
says, the chip is "tpu" and only entries tuned for "tpu" apply. CPUs are one chip, "cpu": there
Pallas kernels run in JAX's interpreter, whose costs do not depend much on the CPU model.
"""

from __future__ import annotations

import functools
import os
import re

import torch

# Cloud TPU accelerator types (TPU_ACCELERATOR_TYPE's prefix) -> JAX's chip names
_ACCELERATOR_TYPES = {
    "v2": "v2",
    "v3": "v3",
    "v4": "v4",
    "v5litepod": "v5e",
    "v5e": "v5e",
    "v5p": "v5p",
    "v6e": "v6e",
    "tpu7x": "7x",
    "v7x": "7x",
    "7x": "7x",
}


def chip_of(device: torch.device | str) -> str:
    """The chip name of `device` (a torch device or its type)."""
    kind = getattr(device, "type", device)
    if kind == "cpu":
        return "cpu"
    if kind == "cuda":
        index = getattr(device, "index", None)
        return _cuda_name(0 if index is None else index)
    if kind == "tpu":
        return _tpu_generation()
    return str(kind)


@functools.lru_cache(maxsize=16)
def _cuda_name(index: int) -> str:
    return "cuda:" + torch.cuda.get_device_name(index)


def _tpu_generation() -> str:
    forced = os.environ.get("TPU_KERNELS_CHIP")
    if forced:
        return forced
    return _detected_tpu()


@functools.lru_cache(maxsize=1)
def _detected_tpu() -> str:
    from_jax = _jax_tpu()
    if from_jax:
        return from_jax
    return accelerator_type_chip(os.environ.get("TPU_ACCELERATOR_TYPE", "")) or "tpu"


def _jax_tpu() -> str | None:
    import jax

    try:
        if jax.default_backend() != "tpu":
            return None
        kind = jax.devices()[0].device_kind
    except RuntimeError:
        return None
    return device_kind_chip(kind)


def device_kind_chip(device_kind: str) -> str | None:
    """JAX's `device_kind` ("TPU v6 lite", "TPU7x") -> its chip name ("v6e", "7x"), or None."""
    from tpu_kernels import _compat

    try:
        return _compat.get("chip_version_from_device_kind")(device_kind).value
    except Exception:  # an unknown kind, or the private helper gone: the caller says "tpu"
        return None


def accelerator_type_chip(accelerator_type: str) -> str | None:
    """A Cloud TPU accelerator type ("v6e-8", "v5litepod-16", "tpu7x-8") -> its chip name."""
    m = re.fullmatch(r"([a-z0-9]+?)(?:-\d+)?", accelerator_type.strip().lower())
    return _ACCELERATOR_TYPES.get(m.group(1)) if m else None
