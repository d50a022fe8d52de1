"""How Pallas kernels run where there is no TPU: JAX's interpreters.

Kernels are written for the TPU and need no `interpret=True`: tpu_kernels traces
them with JAX's `pallas_tpu_interpret_mode_context_manager` set, which every
`pallas_call` consults. Two interpreters:

- "fast" (default): plain interpret mode; the kernel body runs as ordinary JAX
  ops on the CPU (about 0.2 ms for a small grid here).
- "tpu": the TPU-semantics interpreter (`pltpu.InterpretParams`): simulates
  VMEM, DMAs and semaphores and can detect races (about 100x slower). Pass an
  `InterpretParams` for its options, e.g. `InterpretParams(detect_races=True)`.

The mode is part of the compilation cache key, so switching is safe.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Iterator
from typing import Any

from jax.experimental.pallas import tpu as pltpu

type Mode = str | pltpu.InterpretParams

_ENV = "TPU_KERNELS_INTERPRET"
_current: contextvars.ContextVar[Any] = contextvars.ContextVar("tpu_kernels_interpret", default=None)
_global: Any = None


def _resolve(mode: Mode) -> Any:
    """A user-facing mode -> the value `pallas_call` expects in its config."""
    if isinstance(mode, pltpu.InterpretParams):
        return mode
    if mode == "fast":
        return True
    if mode == "tpu":
        return pltpu.InterpretParams()
    if mode == "tpu-races":
        return pltpu.InterpretParams(detect_races=True)
    raise ValueError(
        f"interpret mode must be 'fast', 'tpu', 'tpu-races' or a "
        f"jax.experimental.pallas.tpu.InterpretParams, got {mode!r}"
    )


def set_interpret_mode(mode: Mode) -> None:
    """Set the process-wide interpreter used on CPU ('fast', 'tpu', 'tpu-races', InterpretParams)."""
    global _global
    _global = _resolve(mode)


@contextlib.contextmanager
def interpret_mode(mode: Mode) -> Iterator[None]:
    """Use this interpreter for kernels called inside the block (thread- and task-local)."""
    token = _current.set(_resolve(mode))
    try:
        yield
    finally:
        _current.reset(token)


def current() -> Any:
    """The value for JAX's interpret-mode config: True or an InterpretParams."""
    mode = _current.get()
    if mode is not None:
        return mode
    if _global is None:
        set_interpret_mode(os.environ.get(_ENV, "fast"))
    return _global
