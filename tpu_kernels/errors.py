"""The exceptions tpu_kernels raises. Every message names the op it concerns.

Errors of a call are sorted by kind, as JAX and Tokamax sort them: a bad argument is a
`ValueError` (`InvalidArgumentError`) or a `TypeError` (`InvalidArgumentTypeError`), a valid
call the op cannot run here a `NotImplementedError` (`UnsupportedError`, which lets a caller
fall back to another implementation). All three are `KernelError`s too (calls that failed
while tracing were `KernelError` before they were sorted), and every class here is a
`TpuKernelsError`. `docs/troubleshooting.md` lists each message, what it means and what to do,
and the classes' table ("Error classes").
"""

from __future__ import annotations

import inspect
import os
import warnings


class TpuKernelsError(Exception):
    """Base class of the errors raised by tpu_kernels itself."""


class OpDefinitionError(TpuKernelsError, TypeError):
    """The decorated function or the decorator's options cannot define an op."""


class KernelError(TpuKernelsError, RuntimeError):
    """The kernel failed while tracing, compiling or running; the cause is chained."""


class InvalidArgumentError(KernelError, ValueError):
    """A call's argument has a shape, device, layout or value the op does not accept; the
    message names the op, the argument and what was expected."""


class InvalidArgumentTypeError(KernelError, TypeError):
    """A call's argument has a dtype or a type the op does not accept."""


class UnsupportedError(KernelError, NotImplementedError):
    """A valid call the op, its backend or the device cannot run (yet): tensors on a device it
    has no kernel for, a dtype a backend rejects, ..."""


class BackendUnavailableError(TpuKernelsError, RuntimeError):
    """The device's backend (torch_tpu, JAX's CUDA plugin, ...) is not installed."""


class NoBackwardError(TpuKernelsError, RuntimeError):
    """Backward was requested through an op that defines no backward."""


class ShardingRuleError(TpuKernelsError, ValueError):
    """A sharding rule disagrees with its kernel (the local simulation found a wrong strategy),
    gives DTensor no usable strategy, or cannot be derived (`sharding="derived"`)."""


def wrapping(cause: BaseException) -> type[KernelError]:
    """The class of the KernelError that reports `cause`, raised by a kernel while it was traced,
    compiled or run: the cause's kind kept (a kernel's own shape check raises ValueError, its
    dtype check TypeError, a backend's refusal NotImplementedError), else KernelError."""
    if isinstance(cause, NotImplementedError):  # before ValueError: it is a RuntimeError
        return UnsupportedError
    if isinstance(cause, ValueError):
        return InvalidArgumentError
    if isinstance(cause, TypeError):
        return InvalidArgumentTypeError
    return KernelError


_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def warn_at_caller(message: str, category: type[Warning]) -> None:
    """`warnings.warn` attributed to the first frame outside tpu_kernels (the user's line, which
    is also what a warnings filter matches): Python 3.12's `skip_file_prefixes`, counted here
    frame by frame so that it works on 3.11 too."""
    level, frame = 2, inspect.currentframe().f_back  # stacklevel 2: this function's caller
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)


# The floating dtypes the shipped kernels (and Helion ops with float_only=) accept, as their
# integer-input error says it (docs/dtypes.md). Here, not in definition/dtypes.py, because the
# kernels' JAX halves say it too and import without torch (tpu_kernels.chip).
FLOAT_DTYPES_TEXT = "float16, bfloat16, float32 or float64"
