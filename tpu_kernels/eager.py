"""The eager shortcut of `KernelOp.__call__`: plain CPU calls skip torch's dispatcher.

Calling a registered op goes C++ -> Python twice (the autograd kernel, then the
CPU kernel), about 30 us on our 2-core CPU, several times the cost of the JAX
call for a small kernel (bench/overhead.py). When the dispatcher's choice is
certain - every argument a plain CPU tensor (or a static of the schema's type),
no gradient needed, no torch function or dispatch mode, no functorch transform,
not compiling, dispatch state as at import - `KernelOp.__call__` calls the CPU
kernel itself. Every other call (meta/fake tensors, autograd, torch.compile,
`torch.ops.ns.name(...)`, other devices, keyword arguments) goes through the
dispatcher as before. Checked by tests/test_eager.py against the dispatcher.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from tpu_kernels.signature import Kind

if TYPE_CHECKING:
    from tpu_kernels.op import KernelOp

_TENSOR_TYPES = (torch.Tensor, torch.nn.Parameter)
_STATIC_TYPES: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "float": (float, int),
    "bool": (bool,),
    "str": (str,),
    "ScalarType": (torch.dtype,),
}

_tf_mode = torch._C._is_torch_function_mode_enabled
_dispatch_stack = torch._C._len_torch_dispatch_stack
_functorch = torch._C._are_functorch_transforms_active
_is_compiling = torch.compiler.is_compiling
_grad_enabled = torch.is_grad_enabled
_include, _exclude = torch._C._dispatch_tls_local_include_set, torch._C._dispatch_tls_local_exclude_set
_BASE_TLS = (_include().raw_repr(), _exclude().raw_repr())


def plain_eager() -> bool:
    """No mode, transform, tracing or dispatch-state change that could route the call elsewhere."""
    return (
        not (_tf_mode() or _dispatch_stack() or _functorch() or _is_compiling())
        and (_include().raw_repr(), _exclude().raw_repr()) == _BASE_TLS
    )


class EagerCpuCall:
    def __init__(self, kernel: Callable, checks: list[tuple[bool, tuple[type, ...]]]) -> None:
        self.kernel = kernel
        self.checks = checks  # per positional parameter: (is_tensor, accepted static types)
        self.n = len(checks)

    @classmethod
    def for_op(cls, op: KernelOp) -> EagerCpuCall | None:
        kernel = getattr(op, "_kernels", {}).get("CPU")
        if kernel is None or op.mutates_args:
            return None
        checks = []
        for p in op.signature.params:
            if p.kind is Kind.TENSOR:
                checks.append((True, _TENSOR_TYPES))
            elif p.kind is Kind.STATIC and p.schema_type in _STATIC_TYPES:
                checks.append((False, _STATIC_TYPES[p.schema_type]))
            else:
                return None  # optional or list parameters: the dispatcher's path
        return cls(kernel, checks)

    def accepts(self, args: tuple) -> bool:
        if len(args) != self.n or not plain_eager():
            return False
        grad = _grad_enabled()
        for (is_tensor, types), v in zip(self.checks, args):
            if is_tensor:
                if (
                    type(v) not in types
                    or not v.is_cpu
                    or (grad and v.requires_grad)
                    or v.is_conj()
                    or v.is_neg()
                ):
                    return False
            elif type(v) not in types:
                return False
        return True


__all__ = ["EagerCpuCall", "plain_eager"]
