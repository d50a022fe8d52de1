"""The eager shortcut of `KernelOp.__call__`: plain CPU calls skip torch's dispatcher.

Calling a registered op goes C++ -> Python twice (the autograd kernel, then the
CPU kernel), several times the cost of the JAX call for a small kernel (measured
by bench/overhead.py; docs/performance.md, "Per-call overhead"). When the dispatcher's choice is
certain - every argument a plain CPU tensor (or a static of the schema's type),
no gradient needed, no torch function or dispatch mode, no functorch transform,
not compiling, dispatch state as at import or inside torch.inference_mode() -
`KernelOp.__call__` calls the CPU kernel itself, with the arguments the dispatcher
would pass it (defaults of the parameters not given, float statics given as ints
made floats). It takes only
what the schema accepts: keyword-only parameters passed positionally, statics of
another type, too few or too many arguments all go to the dispatcher, which
raises its error. Every other call (meta/fake tensors, autograd, torch.compile,
`torch.ops.ns.name(...)`, other devices, sparse or quantized tensors, keyword
arguments) goes through the dispatcher as before. Checked by tests/test_eager.py
and tests/test_eager_properties.py (Hypothesis) against the dispatcher.

A call whose tensors all come from the view cache is remembered (`EagerCpuCall._recall`):
the same call again - same tensors unchanged, statics, modes, interpret mode, precision,
and the compiled entry still in its cache - runs without building the key.
"""

from __future__ import annotations

import inspect
import math
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

from tpu_kernels import _compat
from tpu_kernels.definition.signature import (
    DOUBLE_OVERFLOW,
    INT64_MAX,
    INT64_MIN,
    NEGATIVE_ZERO,
    Kind,
    static_key,
)
from tpu_kernels.runtime import precision
from tpu_kernels.runtime.devices.jax_exec import JaxExecutor

if TYPE_CHECKING:
    from tpu_kernels.definition.protocol import Op

_TENSOR_TYPES = (torch.Tensor, torch.nn.Parameter)
_STRIDED = torch.strided
_STATIC_TYPES: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "float": (float, int),
    "bool": (bool,),
    "str": (str,),
    "ScalarType": (torch.dtype,),
}
# list statics: the element types taken without conversion (a float list given ints goes
# to the dispatcher, which converts them)
_LIST_TYPES: dict[str, tuple[type, ...]] = {"int[]": (int,), "float[]": (float,), "bool[]": (bool,)}
_EMPTY = inspect.Parameter.empty
_UNPADDED_MAX = 1024


class _Static(NamedTuple):
    index: int
    types: tuple[type, ...]
    optional: bool  # None is accepted
    is_list: bool  # a list (or tuple) of `types`, keyed as a tuple
    is_int: bool  # an int (or int[]): a value outside int64 goes to the check that refuses it


class _Tensor(NamedTuple):
    index: int
    optional: bool  # None is accepted (an Optional[Tensor] parameter)


_tf_mode = _compat.get("torch_function_mode_enabled")
_dispatch_stack = _compat.get("torch_dispatch_stack_len")
_functorch = _compat.get("functorch_transforms_active")
_is_compiling = torch.compiler.is_compiling
_grad_enabled = torch.is_grad_enabled
_copysign = math.copysign
_precision = precision.current
_include, _exclude = _compat.get("dispatch_tls_include"), _compat.get("dispatch_tls_exclude")


def _tls_state() -> tuple[int, int]:
    return _include().raw_repr(), _exclude().raw_repr()


# The dispatch states in which the dispatcher's choice is the CPU kernel: as at import, and
# inside torch.inference_mode() (which excludes the autograd keys: the dispatcher then goes
# straight to the CPU kernel, whose outputs, made under the mode, are inference tensors
# either way). Any other state (a guard that includes or excludes other keys) declines.
_BASE_STATE = _tls_state()
with torch.inference_mode():
    _PLAIN_STATES = frozenset({_BASE_STATE, _tls_state()})


def plain_eager() -> bool:
    """No mode, transform, tracing or dispatch-state change that could route the call elsewhere."""
    return not _is_compiling() and not _modes_active()


def _modes_active() -> bool:
    """`plain_eager`'s probes but tracing's: a mode, a transform or a dispatch-state change
    (KernelOp.__call__ and try_all have checked `is_compiling()` before the shortcut, for
    dynamo, which must never trace into it)."""
    return bool(
        _tf_mode()
        or _dispatch_stack()
        or _functorch()
        or (_include().raw_repr(), _exclude().raw_repr()) not in _PLAIN_STATES
    )


def recall_checks(
    refs: tuple, static_idx: tuple, statics: tuple, args: tuple, tensor_idx: tuple
) -> list | None:
    """`EagerCpuCall._recall`'s checks: each tensor still its view-cache record's (`refs`: weak
    references to the records, None for an Optional[Tensor] the memo's call left out) and one
    the shortcut may take (CPU, no conjugate or negative bit, not requiring grad under grad
    mode), the memo's statics again (same type and value, a zero of the same sign), and no
    mode; tests/test_eager_checks.py holds them to these rules. The records' arrays, or
    None: decline.

    Each tensor's identity with its record is checked first: it is the cheapest check that
    tells calls apart, and a call with fresh tensors (activations) fails it at once, before
    the statics, the mode probes and the tensors' other reads. The order changes no answer: every check still runs before an array
    is returned."""
    records: list = []
    for i, ref in zip(tensor_idx, refs):
        t = args[i]
        if ref is None:
            if t is not None:
                return None
            records.append(None)
            continue
        seen = ref()
        if seen is None or seen.ref() is not t:
            return None
        records.append(seen)
    for i, value in zip(static_idx, statics):
        v = args[i]
        if type(v) is not type(value) or v != value:
            return None
        if v == 0.0 and type(v) is float and _copysign(1.0, v) != _copysign(1.0, value):
            return None  # 0.0 == -0.0, but each traces its own constant
    if _modes_active():
        return None
    grad = _grad_enabled()
    arrays: list = []
    for i, seen in zip(tensor_idx, records):
        if seen is None:
            arrays.append(None)
            continue
        t = args[i]
        if (
            type(t) not in _TENSOR_TYPES  # a record whose tensor died is no tensor's: None passes `is`
            or not seen.holds(t)
            or not t.is_cpu
            or t.is_conj()
            or t.is_neg()
            or (t.requires_grad and grad)
        ):
            return None
        arrays.append(seen.array)
    return arrays


def dense_plain(t: torch.Tensor, grad: bool) -> bool:
    """Whether the dispatcher would hand `t` (of a type in `_TENSOR_TYPES`) to its device's
    kernel as it is: strided, not nested or quantized, no conjugate or negative bit, and not
    needing a gradient (`grad`: grad mode is on)."""
    return not (
        t.layout is not _STRIDED  # sparse, mkldnn, jagged: other dispatch keys
        or t.is_nested  # strided nested: Signature.check_call names the argument
        or t.is_quantized
        or (grad and t.requires_grad)
        or t.is_conj()
        or t.is_neg()
    )


def static_keys(statics: list[_Static], args: tuple, key: list) -> bool:
    """Appends each static's key part (`static_key`'s) to `key`; False when a static is one the
    shortcut does not take (a type the schema does not take without converting, None for a
    required one, an int outside int64): the dispatcher decides, and raises its error."""
    for i, types, optional, is_list, is_int in statics:
        v = args[i]
        if v is None:
            if not optional:
                return False
            key.append(None)
        elif is_list:
            if type(v) not in (list, tuple) or any(type(e) not in types for e in v):
                return False
            if is_int and any(not INT64_MIN <= e <= INT64_MAX for e in v):
                return False
            key.append(static_key(v))
        elif type(v) not in types or (is_int and not INT64_MIN <= v <= INT64_MAX):
            return False
        elif v == 0.0 and type(v) is float and _copysign(1.0, v) < 0:
            key.append(NEGATIVE_ZERO)  # static_key's, inline: the hot path
        else:
            key.append(v)
    return True


def describe_params(params: list[Any]) -> tuple[list[_Static], list[_Tensor]]:
    """An op's parameters as the shortcuts check them: its statics and its tensors."""
    statics: list[_Static] = []
    tensors: list[_Tensor] = []
    for i, p in enumerate(params):
        if p.is_tensor:
            tensors.append(_Tensor(i, p.kind is Kind.OPTIONAL_TENSOR))
            continue
        base, optional = p.schema_type.removesuffix("?"), p.schema_type.endswith("?")
        is_list = base in _LIST_TYPES
        types = _LIST_TYPES[base] if is_list else _STATIC_TYPES[base]
        statics.append(_Static(i, types, optional, is_list, base in ("int", "int[]")))
    return statics, tensors


def shortcut_params(op: Op) -> bool:
    """Whether an op's parameters are all ones a shortcut takes: no mutated argument, no
    list of tensors, statics of the types `_STATIC_TYPES` and `_LIST_TYPES` name."""
    if op.mutates_args:
        return False
    for p in op.signature.params:
        if p.kind is Kind.TENSOR_LIST:
            return False  # list[Tensor] parameters: the dispatcher's path
        if p.kind is Kind.STATIC:
            base = p.schema_type.removesuffix("?")
            if base not in _STATIC_TYPES and base not in _LIST_TYPES:
                return False
    return True


def call_spec(params: list[Any]) -> tuple:
    """What `complete_args` reads of an op's parameters: (index by name, how many may be passed
    positionally, how many must be, the defaults, the required ones' indices, the float
    statics' indices, the names)."""
    required = tuple(i for i, p in enumerate(params) if p.default is inspect.Parameter.empty)
    floats = tuple(
        i
        for i, p in enumerate(params)
        if p.kind is Kind.STATIC and p.schema_type.removesuffix("?") == "float"
    )
    return (
        {p.name: i for i, p in enumerate(params)},
        sum(not p.keyword_only for p in params),
        max(required, default=-1) + 1,
        tuple(p.default for p in params),
        required,
        floats,
        tuple(p.name for p in params),
    )


def complete_args(args: tuple, kwargs: dict | None, spec: tuple) -> tuple | None:
    """`EagerCpuCall.complete`: `spec` is the op's `EagerCpuCall._spec`."""
    names, n_positional, n_required, defaults, required, floats, param_names = spec
    n, n_params = len(args), len(defaults)
    if kwargs:
        if n > n_positional:
            return None
        values = [*args, *defaults[n:]]  # a required parameter's default: inspect's empty
        for name, v in kwargs.items():
            i = names.get(name, -1)
            if i < n:  # unknown (-1), or also given positionally
                return None
            values[i] = v
        for i in required:
            if i >= n and values[i] is _EMPTY:  # a required parameter neither given nor named
                return None
        args = tuple(values)
    elif n != n_params or n_positional != n_params:
        if not n_required <= n <= n_positional:
            return None
        args = args + defaults[n:]
    for i in floats:  # given ones only: a default reaches the kernel as written
        if type(args[i]) is int and (i < n or (kwargs and param_names[i] in kwargs)):
            if not -DOUBLE_OVERFLOW < args[i] < DOUBLE_OVERFLOW:
                return None  # no double holds it: Signature.check_call says so
            args = args[:i] + (float(args[i]),) + args[i + 1 :]
    return args


DECLINED = object()
"""`EagerCpuCall.try_call`'s answer when the call must go through the dispatcher."""


class EagerCpuCall:
    """The shortcut for one op: its checks, and the CPU kernel it calls.

    When the CPU kernel is a `JaxExecutor` (Pallas/JAX ops), or one that pads to buckets
    around one, the checks also build the executor's cache key, so a call with a compiled
    entry makes one pass over its arguments: check, key, cache hit, views, kernel.
    """

    def __init__(self, kernel: Callable, params: list[Any]) -> None:
        # params: the op's signature.params; a call passes n_required..n_positional
        # arguments positionally and any parameter by keyword, as the dispatcher's schema
        # takes them; defaults fill the rest.
        self.kernel = kernel
        self.n = len(params)
        self.names = {p.name: i for i, p in enumerate(params)}
        self.param_names = tuple(p.name for p in params)
        self.n_positional = sum(not p.keyword_only for p in params)
        required = [i for i, p in enumerate(params) if p.default is inspect.Parameter.empty]
        self.n_required = max(required, default=-1) + 1
        self.required = frozenset(required)
        self.defaults = tuple(p.default for p in params)
        self.statics, self.tensors = describe_params(params)
        # float params take an int as torch's schema does, converted to float as the
        # dispatcher converts it (an int static would trace differently: x * 2 keeps
        # an int dtype where x * 2.0 does not, and 2 == 2.0 share a cache key).
        self.floats = tuple(
            i
            for i, p in enumerate(params)
            if p.kind is Kind.STATIC and p.schema_type.removesuffix("?") == "float"
        )
        self.rewrite = bool(self.floats) or self.n_positional != self.n  # `complete` has work
        self._spec = call_spec(params)  # what `complete_args` reads
        executor = getattr(kernel, "kernel", kernel)  # a PaddedKernel's own (buckets.py)
        self.executor = executor if isinstance(executor, JaxExecutor) else None
        self.padded = kernel if self.executor is not None and executor is not kernel else None
        self.simple = self.executor is not None and self.executor.simple
        # keys of calls a bucketed op runs unpadded: whether a call pads depends only on what
        # the key holds (the tensors' shapes and dtypes, the statics), so the bucket check
        # runs once per key, not per call
        self._unpadded: set[tuple] = set()
        self._views: dict = {}  # no cached views: every tensor is checked in full
        # the last call whose every tensor came from the view cache (see `_recall`): one
        # tuple, replaced whole, so a thread reads either the old or the new one
        self._memo: tuple | None = None
        self.memoizable = self.executor is not None and not any(s.is_list for s in self.statics)
        self._static_idx = tuple(s.index for s in self.statics)
        self._tensor_idx = tuple(t.index for t in self.tensors)
        if self.executor is not None:
            self._cache = self.executor.cache
            transfer = self.executor.transfer
            self._mode = transfer.mode
            self._peek = self.executor.cache.peek
            self._run = self.executor.run
            self._to_jax = transfer.to_jax
            cache = getattr(transfer, "views", None)  # the CPU's view cache (bridge.VIEWS), read here
            if cache is not None:
                self._views = cache.views

    @classmethod
    def for_op(cls, op: Op) -> EagerCpuCall | None:
        kernel = op.cpu_kernel
        if kernel is None or not shortcut_params(op):
            return None
        return cls(kernel, op.signature.params)

    def complete(self, args: tuple, kwargs: dict | None = None) -> tuple | None:
        """The call's arguments, one per parameter (defaults filled, float statics as
        float), as the dispatcher hands them to the kernel; None if the dispatcher would
        refuse the call's arity or keywords (a keyword-only parameter passed positionally,
        an unknown keyword, an argument given twice, a required one missing)."""
        return complete_args(args, kwargs, self._spec)

    def key(self, args: tuple) -> tuple | None:
        """The executor's cache key for `args`, or None when the dispatcher must decide.

        Same layout as `JaxExecutor`'s key: (mode, matmul precision, statics..., then per
        tensor shape, dtype (or (shape, dtype), or None, for an executor with optional
        tensors)); tests/test_precision.py checks the two agree.
        """
        if _is_compiling():
            return None
        prepared = self._prepare(args)
        return None if prepared is None else prepared[0]

    def _prepare(self, args: tuple) -> tuple[tuple, list, list[int], list] | None:
        """(the executor's cache key, the kernel's arguments, which of them are still tensors,
        each tensor parameter's view-cache record or None) for `args` (one per parameter: `complete` first), or None when the dispatcher must
        decide. The caller has checked `is_compiling()`.

        A tensor in the view cache (`bridge.VIEWS`, a tensor seen before) and unchanged since
        (same object, memory, shape, strides, dtype: `bridge.CachedView`) gives its cached
        view, its key part from the record, and the checks that view taken already hold
        (strided, contiguous: a layout change or a quantized dtype cannot keep all five);
        what can change on the same object (its device, conjugate and negative bits, whether
        it requires grad) is read again. Any other tensor is checked in full and left for the
        caller to view once the key has found a compiled entry.
        """
        if len(args) != self.n or _modes_active():
            return None  # `complete` first
        key: list = [self._mode() if self.executor is not None else None, _precision()]
        if not static_keys(self.statics, args, key):
            return None
        grad = _grad_enabled()
        simple = self.simple
        views = self._views
        arrays: list = []
        fresh: list[int] = []
        records: list = []
        any_tensor = False  # all None: no backend key, the dispatcher's error
        for i, optional in self.tensors:
            t = args[i]
            if t is None:
                if not optional:
                    return None
                key.append(None)
                arrays.append(None)
                records.append(None)
                continue
            any_tensor = True
            if type(t) not in _TENSOR_TYPES:
                return None
            seen = views.get(id(t))
            if seen is not None and seen.holds(t):
                if not t.is_cpu or t.is_conj() or t.is_neg() or (grad and t.requires_grad):
                    return None
                shape, dtype = seen.shape, seen.dtype
                arrays.append(seen.array)
                records.append(seen)
            elif not t.is_cpu or not dense_plain(t, grad):
                return None
            else:
                shape, dtype = t.shape, t.dtype
                fresh.append(len(arrays))
                arrays.append(t)
            if simple:
                key.append(shape)
                key.append(dtype)
            else:
                key.append((shape, dtype))
        return (tuple(key), arrays, fresh, records) if any_tensor else None

    def _remember_unpadded(self, key: tuple) -> None:
        if len(self._unpadded) >= _UNPADDED_MAX:  # bounded, like the executor's cache
            self._unpadded.clear()
        self._unpadded.add(key)

    def accepts(self, args: tuple, kwargs: dict | None = None) -> bool:
        """Would the dispatcher certainly call the CPU kernel with these arguments?"""
        args = self.complete(args, kwargs)
        return args is not None and self.key(args) is not None

    def try_call(self, args: tuple, kwargs: dict | None = None) -> Any:
        """The op's result, or `DECLINED`."""
        if kwargs or len(args) != self.n or self.rewrite:
            args = complete_args(args, kwargs, self._spec)
            if args is None:
                return DECLINED
        return self._call(args)

    def try_all(self, values: tuple, checked: Callable | None = None, recall_only: bool = False) -> Any:
        """`try_call` for a call that names every parameter (`values`: one per parameter, in
        order, as `tokamax.wrap.call_op` has them from a public function's locals()): what
        `try_call(args, kwargs)` does with those names as keywords, without building them.
        Every float static given as an int is made a float, as the dispatcher converts an
        argument it is given.

        `checked`: the public function's argument check (a pure function of the values'
        shapes, dtypes and statics), which the caller has run on `values` (`recall_only`:
        has not run yet). The memo remembers it: with `recall_only`, the call runs only as the
        memo's call again, and only if the memo's call passed the same check - the same
        tensors unchanged and the same statics pass it again, so it need not run; else
        DECLINED, and the caller checks, then calls again without `recall_only`."""
        if len(values) != self.n:
            return DECLINED
        for i in self.floats:
            if type(values[i]) is int:
                if not -DOUBLE_OVERFLOW < values[i] < DOUBLE_OVERFLOW:
                    return DECLINED
                values = values[:i] + (float(values[i]),) + values[i + 1 :]
        if recall_only:
            memo = self._memo
            if memo is None or checked is None or memo[6] is not checked:
                return DECLINED
            return self._recall(memo, values)
        return self._call(values, checked)

    def _call(self, args: tuple, checked: Callable | None = None) -> Any:
        """The op's result for complete arguments (one per parameter), or `DECLINED`;
        `checked`: the check the caller ran on them (`try_all`), remembered with the memo."""
        memo = self._memo
        if memo is not None and (checked is None or memo[6] is checked):
            out = self._recall(memo, args)
            if out is not DECLINED:
                return out
        prepared = self._prepare(args)
        if prepared is None:
            return DECLINED
        key, arrays, fresh, records = prepared
        executor = self.executor
        if executor is None:
            return self.kernel(*args)
        if self.padded is not None and key not in self._unpadded:
            if self.padded.needs_padding(args):
                return self.padded(*args)
            self._remember_unpadded(key)
        generation = self._cache.generation  # read before the entry: a removal after it shows
        entry = self._peek(key)
        if entry is None:  # not compiled yet: the full path
            return executor(*args)
        if fresh:
            for j in fresh:  # tensors seen for the first time, or changed: viewed now
                t = arrays[j]
                if not t.is_contiguous():
                    return executor(*args)  # the executor copies (or refuses) as the op says
                arrays[j] = self._to_jax(t)
        elif self.memoizable:
            self._memo = (
                tuple(None if r is None else weakref.ref(r) for r in records),
                tuple(args[i] for i in self._static_idx),
                key[0],
                key[1],
                entry,
                generation,
                checked,
            )
        return self._run(entry, arrays, args, key[0])

    def _recall(self, memo: tuple, args: tuple) -> Any:
        """The op's result if `args` is the memo's call again, else `DECLINED`.

        The memo is `_prepare`'s outcome for a call whose tensors all came from the view
        cache: their records (weakly: a dropped tensor's view is freed, not kept here), the
        statics, the interpret mode, the matmul precision, the compiled entry and the cache's
        generation. The same call again is: each tensor still its record's (the record alive,
        and the five checks of `_prepare`'s cached branch), the same statics (same type and
        value), no mode, the same interpret mode and precision, the entry not removed since
        (`CompileCache.generation`: a clear, a discard or an eviction). Then the key it would
        build is the memo's, and so is the entry it would find: the call runs without building
        either. What `_prepare` reads again for a cached tensor on every call (its device,
        conjugate and negative bits, requires_grad against grad mode) is read here too.
        """
        refs, statics, mode, precision_, entry, generation, _ = memo
        arrays = recall_checks(refs, self._static_idx, statics, args, self._tensor_idx)
        if (
            arrays is None
            or self._mode() is not mode
            or _precision() != precision_
            or self._cache.generation != generation
        ):
            return DECLINED
        self._cache.hit()  # counted as `peek` counts a hit
        return self._run(entry, arrays, args, mode)


__all__ = [
    "DECLINED",
    "EagerCpuCall",
    "complete_args",
    "plain_eager",
    "recall_checks",
]
