"""Seeing which ops a function calls, with what: the hook `tpu_kernels.autotune` captures by.

While a `recording(callback)` block is open (in any thread), every `KernelOp` call made through
the op (`KernelOp.__call__`, which Tokamax's public functions reach too) is handed to `callback`
as (op, args, kwargs) before anything else happens, with the arguments exactly as the caller
gave them: a tunable the caller passes is the caller's, not tuning's. Outside such a block the
cost is one read of the module global `ACTIVE` per call.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

ACTIVE = False
_CALLBACKS: list[Callable[[Any, tuple, dict], None]] = []
_LOCK = threading.Lock()


def record(op: Any, args: tuple, kwargs: dict) -> None:
    """Hand one call to every open recording."""
    for callback in list(_CALLBACKS):
        callback(op, args, kwargs)


@contextlib.contextmanager
def recording(callback: Callable[[Any, tuple, dict], None]) -> Iterator[None]:
    """Within the block, every op call is also given to `callback` (see the module docstring)."""
    global ACTIVE
    with _LOCK:
        _CALLBACKS.append(callback)
        ACTIVE = True
    try:
        yield
    finally:
        with _LOCK:
            _CALLBACKS.remove(callback)
            ACTIVE = bool(_CALLBACKS)
