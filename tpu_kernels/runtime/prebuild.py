"""Build a call's kernel without running it: how the tuner compiles its candidates ahead of
checking and timing them, in a thread pool (autotuner/point.py).

Inside `build_only()` a call of an op goes its whole way (statics, padding, the eager
shortcut or the dispatcher) to the executor, which finds or builds (traces, lowers, compiles)
the compiled entry for the call's key in its cache, as the call would, and then raises
`Built` instead of running it. A later call with the same arguments finds the entry built.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

_local = threading.local()
_lock = threading.Lock()
ACTIVE = 0  # threads inside build_only() now: the executor's hot path reads only this


class Built(Exception):  # noqa: N818 - not an error: the executor's answer inside build_only()
    """The call's kernel is compiled and in its executor's cache; it did not run."""


@contextlib.contextmanager
def build_only() -> Iterator[None]:
    global ACTIVE
    with _lock:
        ACTIVE += 1
    _local.depth = getattr(_local, "depth", 0) + 1
    try:
        yield
    finally:
        _local.depth -= 1
        with _lock:
            ACTIVE -= 1


def active() -> bool:
    """Whether calls in this thread build only (the executor raises `Built` in place of running)."""
    return ACTIVE > 0 and getattr(_local, "depth", 0) > 0


def build(call: Callable[[], Any]) -> bool:
    """Make `call` build its kernel and not run it: True when it did, False when it returned
    without reaching an executor that can build only (it ran: not a JAX kernel on this device).
    Whatever else `call` raises (a kernel that fails to trace or compile) propagates."""
    with build_only():
        try:
            call()
        except Built:
            return True
    return False


__all__ = ["Built", "active", "build", "build_only"]
