"""How Pallas kernels run where there is no TPU: JAX's interpreters.

Kernels are written for the TPU and need no `interpret=True`: tpu_kernels traces
them with JAX's `pallas_tpu_interpret_mode_context_manager` set, which every
`pallas_call` consults. Two interpreters:

- "fast" (default): plain interpret mode; the kernel body runs as ordinary JAX
  ops on the CPU.
- "tpu": the TPU-semantics interpreter (`pltpu.InterpretParams`): simulates
  VMEM, DMAs and semaphores and can detect races (far slower). Pass an
  `InterpretParams` for its options, e.g. `InterpretParams(detect_races=True)`.

The mode is part of the compilation cache key, so switching is safe. A call
reads the mode once, when it starts (`current()`), and traces, compiles and
runs under that one value even if another thread changes the process-wide
mode meanwhile.

Threads: JAX's TPU-semantics interpreter keeps its simulated memory,
semaphores and race detector in module globals, shared by every call in the
process (two threads calling a kernel under "tpu" at once got each other's
results, NaNs and `KeyError`s in JAX's shared memory). tpu_kernels therefore
runs calls under "tpu", "tpu-races" or an `InterpretParams` one at a time
(`exclusive`), from tracing to the end of execution, and resets that state
after a failure only while holding the same lock. The "fast" interpreter keeps
no global state and runs calls from many threads concurrently.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

from jax.experimental.pallas import tpu as pltpu

from tpu_kernels import _compat
from tpu_kernels._scoped import ScopedSetting

Mode = str | pltpu.InterpretParams  # (a plain alias: Python 3.11 has no `type` statement)


# Re-entrant: a kernel's build (under the lock) may run a nested call in the same thread.
_TPU_INTERPRETER = threading.RLock()
_NO_LOCK = contextlib.nullcontext()


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


_MODE = ScopedSetting("tpu_kernels_interpret", env="TPU_KERNELS_INTERPRET", default="fast", resolve=_resolve)


# Public functions over _MODE, as sources/helion.py writes its own over Helion's CPU mode:
# functions, not aliases of the methods (or ones ScopedSetting builds), so that their
# names, docstrings and `Mode` types are what help(), editors and type checkers see.
def set_interpret_mode(mode: Mode) -> None:
    """Set the process-wide interpreter used on CPU ('fast', 'tpu', 'tpu-races', InterpretParams)."""
    _MODE.set(mode)


def interpret_mode(mode: Mode) -> contextlib.AbstractContextManager[None]:
    """Use this interpreter for kernels called inside the block (thread- and task-local)."""
    return _MODE.scoped(mode)


def current() -> Any:
    """The value for JAX's interpret-mode config: True or an InterpretParams."""
    return _MODE.get()


def exclusive(mode: Any) -> contextlib.AbstractContextManager:
    """What to hold while a call traces or runs under `mode` (a value of `current()`).

    For the TPU interpreter (an InterpretParams, or anything but the fast
    interpreter's True and a real device's None) that is the process-wide lock
    over JAX's interpreter state; otherwise nothing."""
    if mode is True or mode is None:
        return _NO_LOCK
    return _TPU_INTERPRETER


def reset_tpu_interpreter() -> None:
    """Reset JAX's TPU-interpreter state after a failed call (it cannot run again
    otherwise), never while another call is using it."""
    with _TPU_INTERPRETER:
        pltpu.reset_tpu_interpret_mode_state()


@contextlib.contextmanager
def _quiet_callbacks() -> Iterator[None]:
    """The TPU interpreter raises from inside io_callbacks, and JAX logs each one with its full
    traceback before re-raising; the exception itself carries the message."""
    log = logging.getLogger(_compat.JAX_CALLBACK_LOGGER)
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        log.setLevel(level)


def run_in_tpu_interpreter(params: pltpu.InterpretParams, run: Callable[[], Any]) -> Any:
    """`run()` (a kernel traced, compiled and run under `params`, blocking until its results
    are ready) holding the TPU interpreter, as every use of it must (`exclusive`); after an
    exception, JAX's interpreter state is reset (it cannot run again otherwise) and the
    exception re-raised. JAX's log of the failing io_callback is silenced."""
    with exclusive(params):
        try:
            with _quiet_callbacks():
                return run()
        except Exception:
            reset_tpu_interpreter()
            raise
