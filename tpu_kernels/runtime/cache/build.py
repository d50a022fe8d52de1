"""One kernel build: trace, then load the executable from disk or lower, compile and store it.

The key is taken from the trace (`program.digest`: the jaxpr with its parameters and
constants by value) and the settings that lowering and compiling read; the trace is the
cheap step of a build (milliseconds), lowering and compiling the expensive ones, so a hit
skips those. A hit is an executable serialized by `jax.experimental.serialize_executable`,
in an entry (`entry.py`) that must carry the very key that asked for it, with the argument
and result types of this trace; anything else is rejected and replaced.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
from jax.experimental import serialize_executable

from tpu_kernels import _compat, cpu_client
from tpu_kernels.runtime.cache import entry, program, store

jax_config = _compat.get("jax_config")


@dataclasses.dataclass(frozen=True)
class Kernel:
    """What one build compiles, besides its trace: the settings lowering and compiling read."""

    op: str  # the op's name (in the entry and the event log, not in the key: the program is)
    device_type: str  # the torch device type
    mode: Any  # the Pallas interpreter mode (True: the fast one; only that is stored)
    precision: str  # the float32 matmul precision the trace ran under
    x64: bool  # traced in JAX's 64-bit mode
    sharding: Any = None  # the argument sharding the jit pins


@dataclasses.dataclass(frozen=True)
class Built:
    fn: Callable  # a jax.stages.Compiled
    path: Path | None  # the entry it was loaded from; None: compiled in this process


def build(jitted: Any, arrays: list[Any], kernel: Kernel, *, load: bool = True) -> Built:
    """The compiled kernel of `jitted` for `arrays`: loaded from disk, or compiled (and
    stored when the cache is on and the program can be keyed). `load=False` compiles even
    when an entry exists, and replaces it (an entry that failed at run time)."""
    cpu_client.synchronous()  # before JAX makes its clients (the first build usually makes them)
    traced = jitted.trace(*arrays)
    root = store.directory()
    if root is None or not (kernel.device_type == "cpu" and kernel.mode is True):
        return Built(traced.lower().compile(), None)
    if not store.usable(root):
        return Built(traced.lower().compile(), None)
    try:
        key = program_key(traced, arrays, kernel)
    except Exception:  # noqa: BLE001 - Undigestible (or a value the walk trips on): not stored
        store.count(root, "uncacheable", kernel.op)
        return Built(traced.lower().compile(), None)
    path = store.entry_path(root, key)
    if load:
        loaded = _load(root, path, key, traced, arrays, kernel)
        if loaded is not None:
            return Built(loaded, path)
    lowered = traced.lower()
    compiled = lowered.compile()
    try:
        payload, _, _ = serialize_executable.serialize(compiled)
    except (ValueError, NotImplementedError, TypeError):  # e.g. constants held as arguments
        store.count(root, "uncacheable", kernel.op)
        return Built(compiled, None)
    store.count(root, "misses", kernel.op)
    header = {
        "op": kernel.op,
        "in_avals": _avals(traced.jaxpr.in_avals),
        "out_avals": _avals(traced.jaxpr.out_avals),
        "lapack": "lapack" in lowered.as_text(),
    }
    try:
        store.write_atomic(path, entry.encode(key, header, payload))
        store.count(root, "writes", kernel.op)
    except OSError:  # a read-only or full directory: the kernel still runs
        pass
    return Built(compiled, None)


def _load(
    root: Path, path: Path, key: str, traced: Any, arrays: list[Any], kernel: Kernel
) -> Callable | None:
    """The executable stored at `path`, if it passes every check for this key and trace."""
    try:
        data = store.read(path)
        if data is None:
            return None
        header, payload = entry.decode(data, key)
        if header.get("in_avals") != _avals(traced.jaxpr.in_avals) or header.get("out_avals") != _avals(
            traced.jaxpr.out_avals
        ):
            raise entry.Rejected("argument or result types differ from this trace's")
        if header.get("lapack"):
            initialize = _compat.get("initialize_lapack")
            if initialize is None:
                raise entry.Rejected("calls LAPACK, which this JAX cannot set up for a loaded executable")
            initialize()
        device = jax.devices(kernel.device_type)[0]
        fn = serialize_executable.deserialize_and_load(
            payload, _in_tree(arrays), traced.out_tree, backend=device.client, execution_devices=[device]
        )
        if (
            _avals(jax.tree_util.tree_leaves(fn.in_avals)) != header["in_avals"]
            or _avals(jax.tree_util.tree_leaves(fn.out_info)) != header["out_avals"]
        ):
            raise entry.Rejected("the executable's argument or result types differ from its header's")
    except Exception:  # noqa: BLE001 - Rejected, or an executable that no longer loads
        store.count(root, "rejected", kernel.op)
        return None
    store.count(root, "hits", kernel.op)
    return fn


def _in_tree(arrays: list[Any]) -> Any:
    """The argument structure the executable is called with: (positional tuple, {} keywords)."""
    return jax.tree_util.tree_structure((tuple(arrays), {}))


def _avals(avals: Any) -> list:
    return [[list(a.shape), str(a.dtype), bool(getattr(a, "weak_type", False))] for a in avals]


# ---- the key ---------------------------------------------------------------------------
def program_key(traced: Any, arrays: list[Any], kernel: Kernel) -> str:
    """The entry's name: a digest of the traced program and of everything that turns it
    into an executable. Undigestible when some part cannot be read exactly."""
    n_args = len(jax.tree_util.tree_leaves(arrays))
    if len(traced.jaxpr.jaxpr.invars) != n_args:
        raise program.Undigestible("the trace holds constants passed as arguments")
    device = jax.devices(kernel.device_type)[0]
    settings = trace_settings()
    if settings is None:
        raise program.Undigestible("a mesh or axis context is active")
    return program.digest(
        traced.jaxpr,
        entry.FORMAT,
        _versions(),
        device.platform,
        device.client.platform_version,
        device.device_kind,
        store.host(),
        os.environ.get("XLA_FLAGS", ""),
        compile_options(),
        repr(kernel.mode),
        kernel.precision,
        kernel.x64,
        repr(kernel.sharding),
        settings,
        str(_in_tree(arrays)),
        str(traced.out_tree),
    )


def compile_options() -> bytes:
    """The compile options JAX would hand XLA for a one-device program, serialized: what
    `JAX_DISABLE_MOST_OPTIMIZATIONS`, `JAX_OPTIMIZATION_LEVEL`, `JAX_MEMORY_FITTING_LEVEL` and
    the rest of JAX's compile settings turn into (JAX's own persistent cache keys on them too).
    Undigestible when this JAX cannot say."""
    get = _compat.get("jax_compile_options")
    if get is None:
        raise program.Undigestible("this JAX's compile options cannot be read")
    return get(num_replicas=1, num_partitions=1).SerializeAsString()


def _versions() -> tuple:
    import jaxlib

    from tpu_kernels._version import __version__

    return (sys.version, jax.__version__, jaxlib.__version__, __version__)


def trace_settings() -> str | None:
    """A digest of JAX's settings that change what a trace or lowering produces (what jit
    keys its own caches on); None when one cannot be read reliably (a mesh or axis context)."""
    parts = []
    for name, value in zip(jax_config.trace_context_names(), jax_config.trace_context()):
        if isinstance(value, _compat.get("AxisEnv")):
            if value.axis_sizes or value.spmd_axis_names or value.explicit_mesh_axis_names:
                return None
            value = "empty-axis-env"
        elif type(value) is object:
            # A bare object() is a "not set" sentinel (Tokamax's config options, made with
            # jax.make_user_context, default to one): it means the same in every process.
            value = "sentinel"
        parts.append((name, value))
    try:
        return program.value_digest(tuple(parts))
    except program.Undigestible:
        return None


__all__ = ["Built", "Kernel", "build", "compile_options", "program_key", "trace_settings"]
