"""Processes forked after JAX started: refused with a clear error instead of hanging.

JAX's runtime is multithreaded, and a fork copies only the thread that called it: a child
forked after the parent made JAX's clients (its first op call, or any JAX array) inherits
clients whose threads are gone, and XLA's compiler waits on them forever - the op's first
compile in the child never returns (plain JAX hangs the same way). A `DataLoader` with worker
processes under the "fork" start method (Linux's default) does exactly this when its dataset
calls ops. `check` refuses such a build at once, with what to do instead (docs/troubleshooting.md,
"Processes and fork"); calls that find their executable already compiled are not blocked.
"""

from __future__ import annotations

import os

from tpu_kernels import _compat
from tpu_kernels.errors import BackendUnavailableError

_forked_after_jax = False


def _after_fork_in_child() -> None:
    global _forked_after_jax
    if _compat.get("jax_backends_initialized")():
        _forked_after_jax = True


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_after_fork_in_child)


def check(op: str) -> None:
    """Raise BackendUnavailableError if this process was forked after JAX made its clients."""
    if _forked_after_jax:
        raise BackendUnavailableError(
            f"{op}: this process was forked (os.fork, multiprocessing's 'fork' start method, a "
            f"DataLoader worker) after JAX started in its parent (pid {os.getppid()}), and JAX cannot "
            "compile in it: its threads did not survive the fork, and the compile would hang. Start "
            "workers with 'spawn' or 'forkserver' (multiprocessing.set_start_method('spawn'), "
            "DataLoader(..., multiprocessing_context='spawn')), or call ops only in the main process "
            '(docs/troubleshooting.md, "Processes and fork").'
        )


__all__ = ["check"]
