"""Run a JAX kernel on torch tensors that JAX can address directly (CPU, CUDA).

The shared core of `devices.cpu` and `devices.cuda`: check and convert the
tensor arguments, find or build the compiled callable for this call's
(shapes, dtypes, statics, mode), call it, convert the results back, and write
the new values of mutated arguments into them.

On a cache hit the work is: one tuple key, one DLPack import per tensor not
already viewed, the jitted call (JAX's C++ fast path) and one DLPack export
per output.
"""

from __future__ import annotations

import contextlib
import operator
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import torch

from tpu_kernels import _compat
from tpu_kernels.definition import dtypes
from tpu_kernels.definition.signature import Kind, Signature, static_key, static_value
from tpu_kernels.errors import InvalidArgumentError, InvalidArgumentTypeError, KernelError, wrapping
from tpu_kernels.runtime import forks, interpret, prebuild, precision
from tpu_kernels.runtime.bridge import describe
from tpu_kernels.runtime.cache import CompileCache, build, store

_precision = precision.current


class Transfer(Protocol):
    """What a device contributes to `JaxExecutor`."""

    device_type: str

    def to_jax(self, t: torch.Tensor) -> jax.Array: ...

    def to_torch(self, a: jax.Array) -> torch.Tensor: ...

    def mode(self) -> Any:
        """A hashable token for settings that change the compiled kernel (interpret mode)."""
        ...

    def trace_context(self, mode: Any) -> contextlib.AbstractContextManager: ...

    def recover(self, mode: Any) -> None:
        """Reset device state after a failed call (the TPU interpreter needs it)."""
        ...

    def sharding(self) -> jax.sharding.Sharding | None:
        """The sharding the jit declares for every argument (None: whatever the arrays carry).

        One argument may arrive by different routes (the CPU's NumPy views and
        cached `jax.Array`s): without a declared sharding each route is its own
        jit signature, traced, lowered and compiled again."""
        ...


@dataclass(frozen=True)
class Entry:
    fn: Callable  # compiled; takes the tensor arguments' arrays in param order
    x64: bool  # the call needs JAX's 64-bit mode
    n_results: int | None  # None: a list of any length
    single: bool = False  # fn returns the op's one output as an array, not a tuple (and needs no x64)
    key: tuple = ()  # the in-process cache key it is stored under
    path: Path | None = None  # the on-disk entry it was loaded from (None: compiled here)


def for_op(spec: Any, body: Callable, transfer: Transfer) -> JaxExecutor:
    """The executor of the op's JAX `body` (`spec`: its OpSpec) on the device `transfer` serves (a DeviceSpec.jax_kernel)."""
    return JaxExecutor(
        spec.signature,
        body,
        transfer,
        n_outputs=spec.signature.n_outputs,
        mutated=spec.mutated,
        maxsize=spec.cache_size,
        noncontiguous=spec.noncontiguous,
        returns_list=spec.returns_list,
    )


class JaxExecutor:
    """torch tensors in, torch tensors out, a JAX function in between."""

    def __init__(
        self,
        sig: Signature,
        fn: Callable,
        transfer: Transfer,
        *,
        n_outputs: int,
        mutated: tuple[int, ...] = (),
        maxsize: int = 256,
        noncontiguous: str = "copy",
        returns_list: bool = False,
    ) -> None:
        self.sig = sig
        self.op = sig.op
        self.fn = fn
        self.transfer = transfer
        self.n_outputs = n_outputs
        self.mutated = mutated  # param indices, in mutates_args order
        self.cache: CompileCache[Entry] = CompileCache(maxsize)
        self.noncontiguous = noncontiguous
        self.returns_list = returns_list  # the kernel returns a list of any length
        self._tensor_params = [(i, p.kind, p.name) for i, p in enumerate(sig.params) if p.is_tensor]
        self._static_idx = [i for i, p in enumerate(sig.params) if not p.is_tensor]
        self.simple = all(kind is Kind.TENSOR for _, kind, _ in self._tensor_params)
        self._n_params = len(sig.params)
        self._single = n_outputs == 1 and not sig.returns_tuple and not returns_list
        # bound once: the hot path makes no attribute lookups it can avoid
        self._mode = transfer.mode
        self._to_jax = transfer.to_jax
        self._to_torch = transfer.to_torch
        self._on_device = operator.attrgetter(f"is_{transfer.device_type}")

    # ---- the hot path -------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        values = args if len(args) == self._n_params else self.sig.values(args, kwargs)
        try:
            arrays, key = self._arrays_and_key(values)
        except AttributeError:  # None (or a non-tensor) for a tensor: say which argument
            self.sig.check_tensors(values)
            raise
        entry = self.cache.get_or_build(key, lambda: self._build(arrays, key))
        return self.run(entry, arrays, values, key[0])

    def run(self, entry: Entry, arrays: list[Any], values: Any, mode: Any) -> Any:
        """Call a compiled entry on the arguments' arrays; torch results, mutations written."""
        if prebuild.ACTIVE and prebuild.active():  # the tuner compiling ahead: built, not run
            raise prebuild.Built()
        if mode is True or mode is None:  # fast interpreter or a device: no global state
            return self._run(entry, arrays, values, mode)
        # The TPU interpreter: one call at a time, until its results are ready (JAX
        # dispatches asynchronously and the interpreter runs inside that execution).
        with interpret.exclusive(mode):
            return self._run(entry, arrays, values, mode, block=True)

    def _run(self, entry: Entry, arrays: list[Any], values: Any, mode: Any, block: bool = False) -> Any:
        try:
            if entry.single:
                result = entry.fn(*arrays)
                return self._to_torch(jax.block_until_ready(result) if block else result)
            if entry.x64:
                with jax.enable_x64(True):
                    results = entry.fn(*arrays)
            else:
                results = entry.fn(*arrays)
            if block:
                jax.block_until_ready(results)
            to_torch = self._to_torch
            outs = [to_torch(r) for r in results]
        except Exception as e:
            self.transfer.recover(mode)
            if entry.path is not None:  # loaded from disk: the entry is bad, not the kernel
                return self._run(self._replace_bad_entry(entry, arrays, e), arrays, values, mode, block)
            raise KernelError(f"{self.op}: the kernel failed for {self._describe(values)}: {e}") from e
        for j, i in enumerate(self.mutated):
            values[i].copy_(outs[self.n_outputs + j])
        return self.sig.pack(outs, self.returns_list)

    def _replace_bad_entry(self, bad: Entry, arrays: list[Any], error: Exception) -> Entry:
        """An executable loaded from disk failed at run time (another shape's, a damaged one
        that passed the checks): evict it, compile the kernel from its source, once."""
        warnings.warn(
            f"{self.op}: the executable loaded from the on-disk kernel cache ({bad.path}) failed "
            f"at run time ({type(error).__name__}: {str(error)[:200]}); evicted it and compiled "
            "the kernel again (docs/caching.md).",
            RuntimeWarning,
            stacklevel=5,
        )
        store.evict(bad.path)
        root = store.directory()
        if root is not None:
            store.count(root, "evicted", self.op)
        self.cache.discard(bad.key, bad)
        return self.cache.get_or_build(bad.key, lambda: self._build(arrays, bad.key, load=False))

    def _arrays_and_key(self, values: Any) -> tuple[list[Any], tuple]:
        """The JAX arrays for the kernel, and the cache key: (mode, matmul precision,
        statics, shapes, dtypes). `eager.EagerCpuCall.key` builds the same layout."""
        key: list[Any] = [self._mode(), _precision()]
        for i in self._static_idx:
            key.append(static_key(values[i]))
        arrays: list[Any] = []
        to_jax, on_device = self._to_jax, self._on_device
        if self.simple:
            for i, _, name in self._tensor_params:
                t = values[i]
                key.append(t.shape)
                key.append(t.dtype)
                if on_device(t) and t.is_contiguous():
                    arrays.append(to_jax(t))
                else:
                    arrays.append(self._convert(name, t))
            return arrays, tuple(key)
        convert = self._convert
        for i, kind, name in self._tensor_params:
            v = values[i]
            if kind is Kind.TENSOR_LIST:
                key.append(tuple((t.shape, t.dtype) for t in v))
                arrays.append([convert(name, t) for t in v])
            elif v is None:
                if kind is Kind.TENSOR:
                    self.sig.check_tensors(values)
                key.append(None)
                arrays.append(None)
            else:
                key.append((v.shape, v.dtype))
                arrays.append(convert(name, v))
        return arrays, tuple(key)

    def _convert(self, name: str, t: torch.Tensor) -> jax.Array:
        """Checks, and contiguity, for one tensor argument; then the transfer."""
        if not self._on_device(t):
            raise InvalidArgumentError(
                f"{self.op}: argument '{name}' is on {t.device}, but this call runs on "
                f"{self.transfer.device_type}; move all tensor arguments to one device."
            )
        if not t.is_contiguous():
            if self.noncontiguous == "error":
                raise InvalidArgumentError(
                    f"{self.op}: argument '{name}' is not contiguous (strides {t.stride()}); "
                    "pass x.contiguous(), or define the op with noncontiguous='copy'."
                )
            t = t.contiguous()
        try:
            return self._to_jax(t)
        except Exception:
            dtypes.to_jax(self.op, name, t.dtype)  # an unsupported dtype: say so
            raise

    # ---- the cold path: trace and compile once per key -----------------------------
    def _build(self, arrays: list[Any], key: tuple, load: bool = True) -> Entry:
        forks.check(self.op)  # a child forked after JAX started would hang in the compile
        mode, matmul_precision = key[0], key[1]
        statics = self.sig.static_kwargs(tuple(static_value(k) for k in key[2 : 2 + len(self._static_idx)]))
        names = [name for _, _, name in self._tensor_params]
        for (_, _, name), a in zip(self._tensor_params, arrays):
            for leaf in a if isinstance(a, list) else [a]:
                if leaf is not None and leaf.dtype not in dtypes.JAX_TO_TORCH:
                    raise InvalidArgumentTypeError(
                        f"{self.op}: argument '{name}' has dtype {leaf.dtype}, which tpu_kernels "
                        f"cannot pass to JAX. Supported: {dtypes.SUPPORTED}."
                    )
        n_results = None if self.returns_list else self.n_outputs + len(self.mutated)
        fn, op, trace_context = self.fn, self.op, self.transfer.trace_context
        device = self.transfer.device_type

        def flat(*tensor_args: Any) -> tuple:
            # the precision is set inside the traced function, so it holds whatever
            # JAX's ambient setting is when jit traces
            with trace_context(mode), precision.traced(matmul_precision, device):
                result = fn(**statics, **dict(zip(names, tensor_args)))
            return normalize_results(op, result, n_results, jax.tree_util.tree_leaves(tensor_args))

        x64 = dtypes.needs_x64(arrays, statics)
        # One output and no 64-bit mode: the jitted function returns the array itself,
        # which spares the hot path a tuple and a context manager.
        single = self._single and not self.mutated and not x64
        sharding = self.transfer.sharding()
        body = (lambda *a: flat(*a)[0]) if single else flat
        jitted = jax.jit(body) if sharding is None else jax.jit(body, in_shardings=sharding)
        kernel = build.Kernel(op, self.transfer.device_type, mode, matmul_precision, x64, sharding)
        with interpret.exclusive(mode):  # the recovery too: it resets the interpreter's state
            try:
                with jax.enable_x64(True) if x64 else contextlib.nullcontext():
                    # trace, then load the executable from disk or lower and compile it (cache/build.py)
                    built = build.build(jitted, arrays, kernel, load=load)
            except KernelError:
                raise
            except Exception as e:
                self.transfer.recover(mode)
                tpu_only = self._tpu_only_kernels(jitted, arrays, x64)
                if tpu_only:
                    raise KernelError(
                        f"{self.op}: cannot run on {self.transfer.device_type} tensors: the Pallas "
                        f"kernel{'s' if len(tpu_only) > 1 else ''} {', '.join(tpu_only)} "
                        f"{'are' if len(tpu_only) > 1 else 'is'} written for TPU (pltpu.CompilerParams), "
                        "which JAX cannot lower for GPUs. Run it on TPU or CPU tensors (the CPU "
                        "interprets it), or give the op a JAX, Pallas GPU or Helion body "
                        f"(docs/devices.md). The lowering said: {type(e).__name__}: {e}"
                    ) from e
                raise wrapping(e)(  # the kernel's own input checks keep their kind
                    f"{self.op}: tracing or compiling the kernel failed for "
                    f"{self._describe_arrays(arrays, statics)}: {type(e).__name__}: {e}"
                ) from e
        return Entry(built.fn, x64, n_results, single, key, built.path)

    def _tpu_only_kernels(self, jitted: Any, arrays: list[Any], x64: bool) -> list[str]:
        """The TPU Pallas kernels (pallas_calls with TPU compiler parameters) in the trace, on a
        GPU device, where they cannot lower (JAX fails there with a bare AssertionError)."""
        if self.transfer.device_type in ("cpu", "tpu"):
            return []
        from jax.experimental.pallas import tpu as pltpu

        from tpu_kernels.lowering import jaxprs

        try:
            with jax.enable_x64(True) if x64 else contextlib.nullcontext():
                traced = jitted.trace(*arrays)
        except Exception:  # noqa: BLE001 - the trace itself failed: the original error says why
            return []
        return [
            jaxprs.kernel_name(eqn)
            for eqn in jaxprs.pallas_calls(traced.jaxpr)
            if isinstance(eqn.params.get("compiler_params"), pltpu.CompilerParams)
        ]

    def _describe(self, values: list[Any]) -> str:
        return ", ".join(f"{p.name}={describe(v)}" for p, v in zip(self.sig.params, values))

    def _describe_arrays(self, arrays: list[Any], statics: dict) -> str:
        parts = [f"{name}={describe(a)}" for (_, _, name), a in zip(self._tensor_params, arrays)]
        parts += [f"{k}={v!r}" for k, v in statics.items()]
        return ", ".join(parts)


def normalize_results(op: str, result: Any, n_results: int | None, inputs: list[Any]) -> tuple:
    """The kernel's return value -> a tuple of `n_results` (None: any number) fresh arrays."""
    if isinstance(result, (tuple, list)):
        results = tuple(result)
    elif result is None:
        results = ()
    else:
        results = (result,)
    if n_results is not None and len(results) != n_results:
        raise KernelError(
            f"{op}: the kernel returned {len(results)} arrays, but the op declares "
            f"{n_results} (outputs, then the new value of each mutated argument)."
        )
    fresh = []
    for r in results:
        if not isinstance(r, jax.Array):
            raise KernelError(f"{op}: the kernel returned a {type(r).__name__}; return jax arrays only.")
        # An output that *is* an input (or another output) would come back as the
        # same buffer, and torch ops may not return aliases of their inputs.
        if any(r is x for x in inputs) or any(r is f for f in fresh):
            r = jnp.copy(r)
        fresh.append(r)
    return tuple(fresh)


@contextlib.contextmanager
def pallas_interpret(mode: Any):
    """Trace every `pallas_call` inside with `interpret=mode` (no-op for None)."""
    if mode is None:
        yield
        return
    cfg = _compat.get("jax_config").pallas_tpu_interpret_mode_context_manager
    prev = cfg.swap_local(mode)
    try:
        yield
    finally:
        cfg.set_local(prev)
