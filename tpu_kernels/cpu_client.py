"""JAX's CPU client, made to run each computation in the calling thread (synchronous dispatch).

By default JAX's CPU client dispatches asynchronously: it hands each executable to a worker
thread and returns at once. A tpu_kernels call always waits for its results (torch reads
them as soon as the call returns), so that overlaps nothing; and between two calls the
op's own Python work lets the worker fall asleep, so each call also pays to wake it
(bench/overhead.py and `bench/generate.py --breakdown` measure both ways). JAX reads its
flag `jax_cpu_enable_async_dispatch` once, when it makes the CPU client, so
`synchronous()` turns it off just before tpu_kernels first makes JAX use its backends (the
first compile, DLPack import or export, `KernelOp.jax_function`); importing tpu_kernels
makes no client. When the program made the client before (its own JAX arrays, asynchronous
by default), the flag can no longer change: a one-time note says how to turn it off first.
"""

from __future__ import annotations

import threading
import warnings

import jax

from tpu_kernels import _compat

FLAG = "jax_cpu_enable_async_dispatch"

NOTE = (
    "tpu_kernels: JAX made its CPU client before tpu_kernels' first call (this program ran JAX "
    "first), with asynchronous dispatch: every call on the CPU hands its kernel to a JAX worker "
    "thread and waits for it, which adds tens of microseconds a call here (bench/overhead.py). "
    f'Put jax.config.update("{FLAG}", False) before the program\'s first JAX array (or call '
    "tpu_kernels.cpu_client.synchronous() there) to run each kernel in the calling thread; it "
    "changes no result."
)

_backends_made = _compat.get("jax_backends_initialized")
_lock = threading.Lock()
_done = False


def synchronous() -> None:
    """Turn JAX's asynchronous CPU dispatch off if JAX has not made its CPU client yet, else
    note (once a process) that it is too late and how to do it first. Called before tpu_kernels
    makes JAX use its backends; after the first call, one module-global read."""
    global _done
    if _done:
        return
    with _lock:
        if _done:
            return
        _done = True
        if not _backends_made():
            jax.config.update(FLAG, False)
        elif jax.config.read(FLAG):
            warnings.warn(NOTE, RuntimeWarning, stacklevel=3)


__all__ = ["FLAG", "NOTE", "synchronous"]
