"""A setting with a process-wide value and per-block overrides: the interpreter that runs
Pallas kernels on CPU (`tpu_kernels.runtime.interpret`) and Helion's CPU mode (`sources/helion.py`)."""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Callable, Iterator
from typing import Any


class ScopedSetting:
    """`get()` is the innermost `scoped(value)` block's value in this thread or task (a
    ContextVar), else the process-wide value from `set(value)`, else `$env` (or `default`)
    read at the first `get()`. Every value goes through `resolve` (which checks it) first."""

    def __init__(self, name: str, *, env: str, default: str, resolve: Callable[[Any], Any]) -> None:
        self._scoped: contextvars.ContextVar[Any] = contextvars.ContextVar(name, default=None)
        self._global: Any = None
        self._env, self._default, self._resolve = env, default, resolve

    def set(self, value: Any) -> None:
        self._global = self._resolve(value)

    @contextlib.contextmanager
    def scoped(self, value: Any) -> Iterator[None]:
        token = self._scoped.set(self._resolve(value))
        try:
            yield
        finally:
            self._scoped.reset(token)

    def get(self) -> Any:
        value = self._scoped.get()
        if value is not None:
            return value
        if self._global is None:
            self.set(os.environ.get(self._env, self._default))
        return self._global
