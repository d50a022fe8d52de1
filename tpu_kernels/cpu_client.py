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
A choice the environment states, `TPU_KERNELS_CPU_ASYNC_DISPATCH=1` (or 0), is applied
instead of tpu_kernels' own, and a program that asked for asynchronous dispatch gets no note.
(JAX defines `jax_cpu_enable_async_dispatch` as a flag that reads no environment variable:
`JAX_CPU_ENABLE_ASYNC_DISPATCH=0` in the environment changes nothing, so the variable is
tpu_kernels'; bench/dispatch_modes.py uses it to run both modes.)
"""

from __future__ import annotations

import os
import threading

import jax

from tpu_kernels import _compat
from tpu_kernels.errors import warn_at_caller

FLAG = "jax_cpu_enable_async_dispatch"
ENV = "TPU_KERNELS_CPU_ASYNC_DISPATCH"  # the environment's choice (JAX reads none for the flag)
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")

NOTE = (
    "tpu_kernels: JAX made its CPU client before tpu_kernels' first call (this program ran JAX "
    "first), with asynchronous dispatch: every call on the CPU hands its kernel to a JAX worker "
    "thread and waits for it, which adds tens of microseconds a call here (bench/overhead.py). "
    f'Put jax.config.update("{FLAG}", False) before the program\'s first JAX array (or call '
    "tpu_kernels.cpu_client.synchronous() there) to run each kernel in the calling thread; it "
    f"changes no result. {ENV}=1 in the environment asks for asynchronous dispatch, without this note."
)

_backends_made = _compat.get("jax_backends_initialized")
_lock = threading.Lock()
_done = False


def synchronous() -> None:
    """Turn JAX's asynchronous CPU dispatch off if JAX has not made its CPU client yet, else
    note (once a process) that it is too late and how to do it first. Where the environment
    states a choice (`ENV`), that choice instead, and a note only if it asked for synchronous
    dispatch too late. Called before tpu_kernels makes JAX use its backends; after the first
    call, one module-global read."""
    global _done
    if _done:
        return
    with _lock:
        if _done:
            return
        want_async = stated()  # a value it cannot read raises here, on every call until fixed
        _done = True
        if not _backends_made():
            jax.config.update(FLAG, bool(want_async))
        elif jax.config.read(FLAG) and not want_async:
            warn_at_caller(NOTE, RuntimeWarning)  # the note names the caller's line, not ours


def stated() -> bool | None:
    """The environment's choice (`ENV`): True for asynchronous dispatch, False for synchronous,
    None where it states none. Any other value is refused, naming the variable."""
    value = os.environ.get(ENV)
    if value is None or value.strip() == "":
        return None
    v = value.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise ValueError(
        f"tpu_kernels: {ENV}={value!r} in the environment: expected 1 (asynchronous JAX CPU "
        "dispatch) or 0 (synchronous, the default), or true/false, yes/no, on/off"
    )


__all__ = ["ENV", "FLAG", "NOTE", "stated", "synchronous"]
