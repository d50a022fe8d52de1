"""The eager shortcut of `KernelOp.__call__`: plain CPU calls skip torch's dispatcher.

Calling a registered op goes C++ -> Python twice (the autograd kernel, then the
CPU kernel), several times the cost of the JAX call for a small kernel (measured
by bench/overhead.py; the figures are in the README's "Per-call overhead" table). When the dispatcher's choice is
certain - every argument a plain CPU tensor (or a static of the schema's type),
no gradient needed, no torch function or dispatch mode, no functorch transform,
not compiling, dispatch state as at import - `KernelOp.__call__` calls the CPU
kernel itself, with the arguments the dispatcher would pass it (defaults of the
parameters not given, float statics given as ints made floats). It takes only
what the schema accepts: keyword-only parameters passed positionally, statics of
another type, too few or too many arguments all go to the dispatcher, which
raises its error. Every other call (meta/fake tensors, autograd, torch.compile,
`torch.ops.ns.name(...)`, other devices, sparse or quantized tensors, keyword
arguments) goes through the dispatcher as before. Checked by tests/test_eager.py
and tests/test_eager_properties.py (Hypothesis) against the dispatcher.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from tpu_kernels import _compat, precision
from tpu_kernels.devices.jax_exec import JaxExecutor
from tpu_kernels.signature import Kind

if TYPE_CHECKING:
    from tpu_kernels.op import KernelOp

_TENSOR_TYPES = (torch.Tensor, torch.nn.Parameter)
_STRIDED = torch.strided
_STATIC_TYPES: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "float": (float, int),
    "bool": (bool,),
    "str": (str,),
    "ScalarType": (torch.dtype,),
}

_tf_mode = _compat.get("torch_function_mode_enabled")
_dispatch_stack = _compat.get("torch_dispatch_stack_len")
_functorch = _compat.get("functorch_transforms_active")
_is_compiling = torch.compiler.is_compiling
_grad_enabled = torch.is_grad_enabled
_precision = precision.current
_include, _exclude = _compat.get("dispatch_tls_include"), _compat.get("dispatch_tls_exclude")
_BASE_TLS = (_include().raw_repr(), _exclude().raw_repr())


def plain_eager() -> bool:
    """No mode, transform, tracing or dispatch-state change that could route the call elsewhere."""
    return (
        not (_tf_mode() or _dispatch_stack() or _functorch() or _is_compiling())
        and (_include().raw_repr(), _exclude().raw_repr()) == _BASE_TLS
    )


DECLINED = object()
"""`EagerCpuCall.try_call`'s answer when the call must go through the dispatcher."""


class EagerCpuCall:
    """The shortcut for one op: its checks, and the CPU kernel it calls.

    When the CPU kernel is a `JaxExecutor` (Pallas/JAX ops) the checks also build
    the executor's cache key, so a call with a compiled entry makes one pass over
    its arguments: check, key, cache hit, views, kernel.
    """

    def __init__(
        self,
        kernel: Callable,
        checks: list[tuple[bool, tuple[type, ...]]],
        n_required: int | None = None,
        n_positional: int | None = None,
        defaults: tuple = (),
    ) -> None:
        # checks: per parameter, (is_tensor, accepted static types). A call passes
        # n_required..n_positional arguments (no keywords); `defaults` fill the rest
        # (the values of params[n_required:]), as the dispatcher's schema does.
        self.kernel = kernel
        self.n = len(checks)
        self.n_required = self.n if n_required is None else n_required
        self.n_positional = self.n if n_positional is None else n_positional
        self.defaults = tuple(defaults)
        self.statics = [(i, types) for i, (is_tensor, types) in enumerate(checks) if not is_tensor]
        # float params take an int as torch's schema does, converted to float as the
        # dispatcher converts it (an int static would trace differently: x * 2 keeps
        # an int dtype where x * 2.0 does not, and 2 == 2.0 share a cache key).
        self.floats = frozenset(i for i, (_, types) in enumerate(checks) if types == _STATIC_TYPES["float"])
        self.tensors = [i for i, (is_tensor, _) in enumerate(checks) if is_tensor]
        self.rewrite = bool(self.floats) or self.n_positional != self.n  # `complete` has work
        self.executor = kernel if isinstance(kernel, JaxExecutor) and kernel.simple else None
        if self.executor is not None:
            self._mode = self.executor.transfer.mode
            self._peek = self.executor.cache.peek
            self._run = self.executor.run
            self._to_jax = self.executor.transfer.to_jax

    @classmethod
    def for_op(cls, op: KernelOp) -> EagerCpuCall | None:
        kernel = getattr(op, "_kernels", {}).get("CPU")
        if kernel is None or op.mutates_args:
            return None
        checks = []
        params = op.signature.params
        for p in params:
            if p.kind is Kind.TENSOR:
                checks.append((True, _TENSOR_TYPES))
            elif p.kind is Kind.STATIC and p.schema_type in _STATIC_TYPES:
                checks.append((False, _STATIC_TYPES[p.schema_type]))
            else:
                return None  # optional or list parameters: the dispatcher's path
        # Keyword-only parameters cannot be passed without keywords (and a call with
        # keywords takes the dispatcher): they take their defaults; without one, every
        # call needs a keyword, so the shortcut never applies.
        n_positional = sum(not p.keyword_only for p in params)
        required = [i for i, p in enumerate(params) if p.default is inspect.Parameter.empty]
        if any(i >= n_positional for i in required):
            return None
        n_required = max(required, default=-1) + 1
        defaults = tuple(p.default for p in params[n_required:])
        return cls(kernel, checks, n_required, n_positional, defaults)

    def complete(self, args: tuple) -> tuple | None:
        """The call's arguments, one per parameter (defaults filled, float statics as
        float), as the dispatcher hands them to the kernel; None if the dispatcher
        would refuse the call's arity (keyword-only parameters passed positionally)."""
        n = len(args)
        if n != self.n or self.n_positional != self.n:
            if not self.n_required <= n <= self.n_positional:
                return None
            args = args + self.defaults[n - self.n_required :]
        for i in self.floats:  # given ones only: a default reaches the kernel as written
            if i < n and type(args[i]) is int:
                args = args[:i] + (float(args[i]),) + args[i + 1 :]
        return args

    def key(self, args: tuple) -> tuple | None:
        """The executor's cache key for `args`, or None when the dispatcher must decide.

        Same layout as `JaxExecutor`'s key: (mode, matmul precision, statics..., shape,
        dtype, ...); tests/test_precision.py checks the two agree.
        """
        if len(args) != self.n or not plain_eager():
            return None  # `complete` first
        key: list = [self._mode() if self.executor is not None else None, _precision()]
        for i, types in self.statics:
            v = args[i]
            if type(v) not in types:
                return None
            key.append(v)
        grad = _grad_enabled()
        for i in self.tensors:
            t = args[i]
            if (
                type(t) not in _TENSOR_TYPES
                or not t.is_cpu
                or t.layout is not _STRIDED  # sparse, mkldnn: other dispatch keys
                or t.is_quantized
                or (grad and t.requires_grad)
                or t.is_conj()
                or t.is_neg()
            ):
                return None
            key.append(t.shape)
            key.append(t.dtype)
        return tuple(key)

    def accepts(self, args: tuple) -> bool:
        """Would the dispatcher certainly call the CPU kernel with these arguments?"""
        args = self.complete(args)
        return args is not None and self.key(args) is not None

    def try_call(self, args: tuple) -> Any:
        """The op's result, or `DECLINED`."""
        if len(args) != self.n or self.rewrite:
            args = self.complete(args)
            if args is None:
                return DECLINED
        key = self.key(args)
        if key is None:
            return DECLINED
        if self.executor is None:
            return self.kernel(*args)
        entry = self._peek(key)
        if entry is None:  # not compiled yet, or a non-contiguous input: the full path
            return self.executor(*args)
        arrays = []
        for i in self.tensors:
            t = args[i]
            if not t.is_contiguous():
                return self.executor(*args)
            arrays.append(self._to_jax(t))
        return self._run(entry, arrays, args, key[0])


__all__ = ["DECLINED", "EagerCpuCall", "plain_eager"]
