"""`hl.dot` in Helion's eager reference mode on CPU tensors, where torch has no CPU kernel for
the matmul Helion's reference asks for.

Helion 1.5.1 runs `hl.dot(a, b, acc=acc)` in reference mode (the CPU's "eager" mode) as
`torch.mm(a, b, out_dtype=acc.dtype)` (`aten::mm.dtype`; `bmm` for 3-D operands), and a torch
that has no CPU kernel for it (2.14 here) fails every call: "Could not run 'aten::mm.dtype' with
arguments from the 'CPU' backend", float32 operands included. So a kernel written the way
Helion's docs and the Pallas backend want it (16-bit tiles into a float32 accumulator: one MXU
pass on a TPU at any float32 setting) could not run in the CPU's eager mode at all.

Where that is so, `install` (the first Helion op tpu_kernels makes) has reference mode compute
the product in the output dtype from operands cast to it: for floating operands the same
numbers `aten::mm.dtype` gives, since a product of two bf16 or float16 values is exact in
float32 and both accumulate in float32. Everything else (CUDA tensors, float8 operands, a torch
that has the CPU kernel) runs Helion's own implementation unchanged.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import torch

from tpu_kernels import _compat

_lock = threading.Lock()
_installed: bool | None = None  # None: not tried yet

_FLOAT8 = frozenset(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n))


@functools.cache
def cpu_has_mm_dtype() -> bool:
    """Whether this torch computes `torch.mm(a, b, out_dtype=)` on CPU tensors."""
    a = torch.ones(1, 1, dtype=torch.bfloat16)
    try:
        torch.mm(a, a, out_dtype=torch.float32)
    except (NotImplementedError, RuntimeError, TypeError):
        return False
    return True


def out_dtype_of(
    mat1: torch.Tensor, mat2: torch.Tensor, acc: torch.Tensor | None, out_dtype: Any
) -> torch.dtype:
    """The dtype Helion's `hl.dot` returns: `out_dtype`, else the accumulator's, else int32 for
    int8 operands and float32 for the rest (Helion's `_compute_out_dtype`)."""
    if out_dtype is not None:
        return out_dtype
    if acc is not None:
        return acc.dtype
    return torch.int32 if torch.int8 in (mat1.dtype, mat2.dtype) else torch.float32


def cpu_dot(original: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """Helion's reference `hl.dot`, with CPU floating operands multiplied in the output dtype."""

    def dot(
        mat1: torch.Tensor, mat2: torch.Tensor, acc: torch.Tensor | None = None, out_dtype: Any = None
    ) -> torch.Tensor:
        dtype = out_dtype_of(mat1, mat2, acc, out_dtype)
        if (
            mat1.device.type != "cpu"
            or not dtype.is_floating_point
            or mat1.dtype in _FLOAT8
            or mat2.dtype in _FLOAT8
        ):
            return original(mat1, mat2, acc, out_dtype)
        a, b = mat1.to(dtype), mat2.to(dtype)
        result = torch.matmul(a, b)  # 2-D, or a batch of either side broadcast as Helion's bmm
        return result if acc is None else acc + result

    return dot


def install() -> bool:
    """Route Helion's reference `hl.dot` on CPU tensors through `cpu_dot` where this torch has no
    CPU `aten::mm.dtype`, once. True when reference mode's `hl.dot` runs on CPU tensors (either
    way); False where this Helion keeps its reference elsewhere."""
    global _installed
    if _installed is None:
        with _lock:
            if _installed is None:
                _installed = cpu_has_mm_dtype() or _compat.wrap_helion_dot_reference(cpu_dot)
    return _installed
