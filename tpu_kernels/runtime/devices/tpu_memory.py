"""A TPU call that cannot fit the chip's memory is refused before it launches, naming the op.

torch_tpu defers a launch and reports a program too large for the chip's memory only when a
result is read, and not always the same way: the TPU suite's too-large call (a matmul whose
output alone exceeds the v5e's memory) has said "out of memory" at some commits and only "a
required argument is in a failed state" at others (docs/devices.md), and a failed deferred
program leaves what was fused into it failed too. A program's arguments and results are all
in the chip's memory while it runs, so a call whose inputs and outputs together exceed the
chip's memory (`torch.tpu.get_device_properties().total_memory`) cannot run: `MemoryCheck`
raises `torch.OutOfMemoryError` (the class CUDA's allocator raises) naming the op, each
output and the chip's memory, before anything is launched. It sees only the arguments and
results, not the kernel's scratch nor other tensors alive on the chip: a call it lets through
may still run out of memory, and torch_tpu then reports it as before.

The outputs' shapes come from the kernel traced abstractly (`jax.eval_shape`), once per call
key (statics, shapes, dtypes); a key that fits is remembered, so a repeated call pays a set
lookup.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import torch

from tpu_kernels.definition import dtypes
from tpu_kernels.definition.signature import Signature

_MAX_KEYS = 1024  # as the direct launch's memo (tpu_launch._MAX_KEYS)


@functools.cache
def chip_bytes() -> int | None:
    """The memory of one TPU device in bytes, from torch_tpu; None where it cannot say."""
    tpu = getattr(torch, "tpu", None)
    props = getattr(tpu, "get_device_properties", None)
    if props is None:
        return None
    try:
        total = props().total_memory
    except Exception:  # no device, or a torch_tpu without the property: no check
        return None
    return total if isinstance(total, int) and total > 0 else None


def _size(n: int) -> str:
    """Bytes in the largest binary unit they reach: "16.00 GiB", "3.50 MiB", "512 B"."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.2f} {unit}"
    return f"{n} B"


class MemoryCheck:
    """The check for one kernel body: `fn(**kwargs)` with `sig`'s parameters."""

    def __init__(self, qualname: str, sig: Signature, fn: Callable, memory: Callable[[], int | None] = chip_bytes):
        self.qualname = qualname
        self.sig = sig
        self.fn = fn
        self.memory = memory
        self._fits: set[tuple] = set()

    def check(self, values: tuple, key: tuple) -> None:
        """Raise `torch.OutOfMemoryError` when a call with these values (one per parameter,
        in order) cannot fit the chip's memory; `key` is the call's key."""
        if key in self._fits:
            return
        total = self.memory()
        if total is None:
            return
        inputs = sum(v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor))
        outputs = self._outputs(values)
        if outputs is not None:
            need = inputs + sum(b for _, b in outputs)
            if need > total:
                listed = ", ".join(f"{d} ({_size(b)})" for d, b in outputs)
                raise torch.OutOfMemoryError(
                    f"{self.qualname}: this call needs {_size(need)} of TPU memory for its arguments "
                    f"({_size(inputs)}) and outputs ({listed}), more than the chip's {_size(total)}; "
                    "nothing was launched. Split the call (fewer rows per call, or a smaller batch)."
                )
        if len(self._fits) >= _MAX_KEYS:
            self._fits.clear()
        self._fits.add(key)

    def _outputs(self, values: tuple) -> list[tuple[str, int]] | None:
        """Each output as ("float32[65536, 65536]", bytes), from the kernel traced abstractly;
        None where it cannot be traced so (the launch then reports what it finds)."""
        kwargs: dict[str, Any] = {}
        tensors: dict[str, Any] = {}
        for param, v in zip(self.sig.params, values):
            if param.is_tensor and isinstance(v, torch.Tensor):
                tensors[param.name] = dtypes.spec(self.qualname, param.name, v)
            else:
                kwargs[param.name] = v
        names = list(tensors)
        try:
            out = jax.eval_shape(lambda *ts: self.fn(**kwargs, **dict(zip(names, ts))), *tensors.values())
        except Exception:  # the kernel's own checks or trace: the launch raises them, by the op's name
            return None
        listed = []
        for leaf in jax.tree_util.tree_leaves(out):
            size = math.prod(leaf.shape) * leaf.dtype.itemsize
            listed.append((f"{leaf.dtype}{list(leaf.shape)}", size))
        return listed


__all__ = ["MemoryCheck", "chip_bytes"]
