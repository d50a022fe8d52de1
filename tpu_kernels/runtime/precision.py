"""The float32 matmul precision a kernel is traced with, taken from torch's settings.

PyTorch users set matmul precision with `torch.set_float32_matmul_precision`
("highest", "high", "medium"), and on a TPU with torch_tpu's
`torch.tpu.precision(torch.tpu.Precision.HIGH)` context. A kernel is a JAX
function, whose dots read JAX's default matmul precision instead. tpu_kernels
reads torch's setting at each call, traces the kernel at the matching JAX name
(`traced`: `jax.default_matmul_precision(...)` for its XLA dots), and keeps the name
in the compile-cache key, so changing the setting compiles (once) a kernel with
the new precision rather than reusing the old one.

| torch | torch_tpu (`torch.tpu.Precision`) | JAX | XLA dots on a TPU | dots in a Pallas TPU kernel |
|---|---|---|---|---|
| "highest" (torch's default) | HIGHEST | "highest" | float32 (~1e-7) | HIGHEST (~1e-7) |
| "high" | HIGH | "high" | bf16_3x (1.3e-5) | HIGHEST (~1e-7, ~1/6 of one pass's speed); three bf16 passes (4.4e-6) in a kernel that uses `mosaic_precision.dot`, as the shipped matmul does |
| "medium" | DEFAULT (torch_tpu's default) | "default" | one bf16 pass (2.3e-3) | DEFAULT (2.3e-3) |

(normwise error of float32 products against float64 at K=2048, measured on a TPU v5e.)
Mosaic, the TPU kernel compiler, refuses HIGH (JAX 0.10.2: "Unsupported dot precision:
HIGH"), so a kernel is traced with `mosaic_precision.traced_at`: plain-XLA dots at the
JAX name, the dots of its Pallas kernel bodies at HIGHEST where the name means HIGH, or as
three bf16 passes where the body calls `mosaic_precision.dot` (mosaic_precision.py). On CUDA, where Pallas kernels lower through Triton (HIGH is
TF32 there), the kernel is traced at the JAX name throughout (`traced`).

With torch_tpu imported, its context overrides torch's setting; on a TPU
machine torch_tpu also patches `torch.set_float32_matmul_precision` to set its
own global precision (default DEFAULT, i.e. "medium"), which torch's getter
then returns. It never
imports torch_tpu itself (the import takes seconds and fails without libtpu in
some processes): without torch_tpu in `sys.modules`, torch's own setting is used.

Only dots whose precision is not given explicitly follow the setting (a
`precision=` argument to `jnp.dot`, or a Tokamax op's `precision=`, wins).
XLA on the CPU computes float32 dots in float32 whatever the precision, so on
the CPU the setting changes the compiled module, not the numbers.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any

import jax
import torch

from tpu_kernels import _compat
from tpu_kernels.runtime.mosaic_precision import traced_at

TORCH_TO_JAX = {"highest": "highest", "high": "high", "medium": "default"}
"""torch.get_float32_matmul_precision() -> jax.default_matmul_precision's name."""

TPU_TO_JAX = {"HIGHEST": "highest", "HIGH": "high", "DEFAULT": "default"}
"""torch_tpu's Precision member name -> JAX's name."""

_TPU_IMPL = _compat.TORCH_TPU_PRECISION_MODULE  # read from sys.modules only (_compat)


def current() -> str:
    """The JAX matmul precision name ("highest", "high", "default") in effect for a call now."""
    tpu = _compat.torch_tpu_precision()
    if tpu is not None:
        # the innermost torch.tpu.precision(...) context, else torch_tpu's global. Where
        # torch_tpu registered its device it patched torch.{set,get}_float32_matmul_precision
        # to be that global; where it did not (imported without a TPU) torch's own setting
        # moves apart from it, and only a context that differs from the global shows that a
        # user asked for it. (A context equal to the unpatched global is indistinguishable
        # from none.)
        effective, global_ = tpu
        if effective != global_:
            return TPU_TO_JAX[effective.name]
    # read through the torch module each call: torch_tpu replaces the function when it
    # loads (bench/overhead.py's pieces time the whole read).
    return TORCH_TO_JAX[torch.get_float32_matmul_precision()]


_GPUS = frozenset({"cuda", "gpu", "rocm"})


def traced(matmul_precision: str, device: str) -> contextlib.AbstractContextManager:
    """The context a kernel for `device` (a torch device type, or a JAX platform) is traced in
    at JAX matmul precision `matmul_precision`. On a GPU Pallas kernels lower through Triton,
    which takes HIGH (as TF32): `jax.default_matmul_precision` throughout. Elsewhere (the TPU,
    and the CPU, which interprets TPU kernels) `traced_at`: Pallas kernel bodies at a precision
    Mosaic compiles ("highest" for "high")."""
    if device in _GPUS:
        return jax.default_matmul_precision(matmul_precision)
    return traced_at(matmul_precision)


def at_precision(fn: Callable, matmul_precision: str) -> Callable:
    """`fn`, traced at JAX matmul precision `matmul_precision` (as `traced_at`: its Pallas
    kernels at a precision Mosaic compiles) whatever the caller's.

    For the TPU path, which traces `fn` itself and caches per shape only (torch_tpu's
    `jax_op`): build one wrapped function, and one inner op, per precision."""

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        with traced_at(matmul_precision):
            return fn(*args, **kwargs)

    return wrapped


__all__ = ["TORCH_TO_JAX", "TPU_TO_JAX", "at_precision", "current", "traced"]
