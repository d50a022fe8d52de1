"""Backward for a kernel op: explicit, derived with jax.vjp, or absent.

- explicit: another kernel, registered as its own op (`<ns>::<name>_backward`)
  by `@op.def_backward`; its parameters are bound by name to the forward's
  inputs, outputs (residuals included) and `grad_<output>` for the incoming
  gradient of each returned output.
- derived: `jax.vjp` of the kernel body (when JAX can differentiate it: plain
  jnp, or a `jax.custom_vjp`) or of a JAX reference function given beside a
  Pallas forward. Also its own op, `<ns>::<name>_backward`, which recomputes
  the forward inside (rematerialisation) and returns one gradient per
  floating-point tensor input.
- absent: backward raises NoBackwardError naming the op and the fixes; the
  forward still runs with inputs that require grad.

Keyword-only tensor arguments never receive gradients (torch passes them
outside the autograd graph).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import torch

from tpu_kernels import checking
from tpu_kernels.errors import NoBackwardError, OpDefinitionError
from tpu_kernels.signature import Kind, Param, Signature

if TYPE_CHECKING:
    from tpu_kernels.op import KernelOp


def supported(sig: Signature) -> bool:
    """torch registers autograd only for ops without keyword-only tensors."""
    return not any(p.is_tensor and p.keyword_only for p in sig.params)


def register(kop: KernelOp, lib: torch.library.Library, cpu_kernel: Callable | None = None) -> None:
    """Register the op's autograd formula; what it does is looked up at backward time,
    so `def_backward` may come after the decorator.

    `cpu_kernel`: the op's CPU kernel, for the fast path below.
    """

    def setup_context(ctx: Any, inputs: tuple, output: Any, keyword_only_inputs: dict | None = None) -> None:
        values = list(inputs) + [
            (keyword_only_inputs or {}).get(p.name, p.default) for p in kop.signature.params[len(inputs) :]
        ]
        outs = list(output) if isinstance(output, (tuple, list)) else [output]
        flat, rebuild = _flatten(values + outs)
        ctx.save_for_backward(*flat)
        ctx.rebuild = rebuild
        ctx.n_inputs = len(values)

    def backward(ctx: Any, *grads: Any) -> tuple:
        restored = ctx.rebuild(list(ctx.saved_tensors))
        values, outs = restored[: ctx.n_inputs], restored[ctx.n_inputs :]
        if kop._backward is None:
            raise NoBackwardError(
                f"{kop.name}: backward called, but the op defines no backward. Give it one: "
                f"@{kop.fn_name}.def_backward with a backward kernel, backward='vjp' when "
                "JAX can differentiate the kernel body, or reference=<a JAX function> "
                "to differentiate instead."
            )
        n_positional = sum(not p.keyword_only for p in kop.signature.params)
        grads_in = kop._backward(values, outs, list(grads[: kop.n_visible]))
        if checking.ARMED:  # checked mode: the gradients against the reference's
            checking.check_backward(kop, values, list(grads[: kop.n_visible]), grads_in)
        return tuple(grads_in[:n_positional])

    impl = _autograd_impl(kop, backward, setup_context)
    if impl is None or cpu_kernel is None:  # torch moved its internals: the public registration
        torch.library.register_autograd(kop.name, backward, setup_context=setup_context, lib=lib)
        return
    lib.impl(kop.short_name, _fast_path(impl, cpu_kernel), "Autograd", with_keyset=True)


_AFTER_AUTOGRAD = torch._C._after_autograd_keyset
_CPU = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
# What is left below autograd of a plain CPU call: the CPU backend, and maybe
# ADInplaceOrView (a fallthrough for ops that mutate nothing; the dispatcher
# usually drops it before calling us).
_PLAIN_CPU = frozenset(
    {_CPU.raw_repr(), (_CPU | torch._C.DispatchKeySet(torch._C.DispatchKey.ADInplaceOrView)).raw_repr()}
)


def _fast_path(impl: Callable, cpu_kernel: Callable) -> Callable:
    """The autograd kernel torch's `register_autograd` would install, plus one shortcut.

    When nothing needs a gradient and nothing but the CPU backend lies below
    autograd (no fake/functional/tracing mode, no other device), the dispatcher's
    next stop is certainly the CPU kernel; calling it directly skips a second
    dispatch round through Python (measured in bench/overhead.py). Every other
    case takes torch's own path.
    """
    is_grad_enabled, any_requires_grad = torch._C.is_grad_enabled, torch._C._any_requires_grad

    def autograd_kernel(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        if (keyset & _AFTER_AUTOGRAD).raw_repr() in _PLAIN_CPU and not (
            is_grad_enabled() and any_requires_grad(*args)
        ):
            return cpu_kernel(*args, **kwargs)
        return impl(keyset, *args, **kwargs)

    return autograd_kernel


def _autograd_impl(kop: KernelOp, backward: Callable, setup_context: Callable) -> Callable | None:
    """torch's generated autograd kernel for this op (what `register_autograd` registers)."""
    try:
        from torch._library.autograd import Info, make_autograd_impl
    except ImportError:  # pragma: no cover - depends on torch's internals
        return None
    return make_autograd_impl(kop.overload, Info(_backward_fn=backward, _setup_context_fn=setup_context))


def _flatten(items: list[Any]) -> tuple[list[torch.Tensor], Callable[[list[torch.Tensor]], list[Any]]]:
    """Tensors (also inside lists) out of `items`, and the function that puts them back."""
    flat: list[torch.Tensor] = []
    layout: list[Any] = []
    for v in items:
        if isinstance(v, torch.Tensor):
            layout.append(("t",))
            flat.append(v)
        elif isinstance(v, (list, tuple)) and v and all(isinstance(t, torch.Tensor) for t in v):
            layout.append(("l", len(v)))
            flat.extend(v)
        else:
            layout.append(("v", v))

    def rebuild(tensors: list[torch.Tensor]) -> list[Any]:
        out, k = [], 0
        for entry in layout:
            if entry[0] == "t":
                out.append(tensors[k])
                k += 1
            elif entry[0] == "l":
                out.append(list(tensors[k : k + entry[1]]))
                k += entry[1]
            else:
                out.append(entry[1])
        return out

    return flat, rebuild


# ---- explicit backward ------------------------------------------------------------


def check_explicit(kop: KernelOp, bwd: Signature, wrt: tuple[str, ...]) -> None:
    """Every backward parameter binds to something the forward provides, and it
    returns one gradient per `wrt` name (checked before the backward op is registered)."""
    fwd = kop.signature
    available = {p.name for p in fwd.params} | set(kop.output_names)
    available |= {f"grad_{n}" for n in kop.output_names[: kop.n_visible]}
    for p in bwd.params:
        if p.name not in available:
            raise OpDefinitionError(
                f"{bwd.op}: parameter '{p.name}' matches nothing the forward provides; "
                f"available: {sorted(available)}."
            )
    tensors = {p.name for p in fwd.params if p.kind in (Kind.TENSOR, Kind.OPTIONAL_TENSOR)}
    for name in wrt:
        if name not in tensors:
            raise OpDefinitionError(
                f"{bwd.op}: wrt names '{name}', which is not a tensor parameter of {kop.name}."
            )
        if fwd.params[fwd.index(name)].keyword_only:
            raise OpDefinitionError(
                f"{bwd.op}: wrt names '{name}', a keyword-only parameter of {kop.name}; torch "
                "gives keyword-only arguments no gradient."
            )
    if bwd.n_outputs != len(wrt):
        raise OpDefinitionError(
            f"{bwd.op}: returns {bwd.n_outputs} gradients, but wrt has {len(wrt)} names "
            f"{wrt}; return one gradient per wrt name."
        )


@dataclasses.dataclass
class Composite:
    """A backward written as a torch function of other kernel ops (`composite=True`)."""

    name: str
    fn: Callable
    signature: Signature

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


@dataclasses.dataclass
class ExplicitBackward:
    """Calls the backward op with arguments bound by name; returns one grad per input."""

    kop: KernelOp
    bwd: KernelOp | Composite
    wrt: tuple[str, ...]

    def __call__(self, values: list[Any], outs: list[Any], grads: list[Any]) -> list[Any]:
        fwd = self.kop.signature
        env = {p.name: v for p, v in zip(fwd.params, values)}
        env.update(zip(self.kop.output_names, outs))
        env.update({f"grad_{n}": g for n, g in zip(self.kop.output_names, grads)})
        args = [env[p.name] for p in self.bwd.signature.params if not p.keyword_only]
        kwargs = {p.name: env[p.name] for p in self.bwd.signature.params if p.keyword_only}
        result = self.bwd(*args, **kwargs)
        result = result if isinstance(result, tuple) else (result,)
        by_name = dict(zip(self.wrt, result))
        return [by_name.get(p.name) if values[i] is not None else None for i, p in enumerate(fwd.params)]


# ---- derived backward (jax.vjp) ---------------------------------------------------


def vjp_signature(fwd: Signature, qualname: str) -> Signature:
    """The incoming gradients, then the forward's parameters; returns a list of grads.

    `grads` comes first: torch's autograd registration rejects keyword-only
    tensors, and a required parameter may not follow defaulted ones."""
    grads = Param("grads", Kind.TENSOR_LIST, "Tensor[]", inspect.Parameter.empty, keyword_only=False)
    return Signature(qualname, (grads,) + fwd.params, n_outputs=1, returns_tuple=False)


def vjp_kernel(fwd: Signature, diff_fn: Callable, n_visible: int) -> Callable:
    """A JAX kernel computing grads of `diff_fn`'s first `n_visible` outputs
    with respect to every floating-point tensor input, in signature order."""
    tensor_names = [p.name for p in fwd.tensor_params]

    def kernel(**kwargs: Any) -> list:
        cotangents = list(kwargs.pop("grads"))
        primals = [kwargs.pop(n) for n in tensor_names]  # signature order, not sorted keys
        statics = kwargs
        leaves, treedef = jax.tree_util.tree_flatten(primals)
        diff_idx = [i for i, leaf in enumerate(leaves) if jnp.issubdtype(leaf.dtype, jnp.floating)]

        def f(*diff: Any) -> tuple:
            full = list(leaves)
            for i, d in zip(diff_idx, diff):
                full[i] = d
            out = diff_fn(**statics, **dict(zip(tensor_names, jax.tree_util.tree_unflatten(treedef, full))))
            out = tuple(out) if isinstance(out, (tuple, list)) else (out,)
            return out[:n_visible]

        outs, pullback = jax.vjp(f, *[leaves[i] for i in diff_idx])
        cts = tuple(ct.astype(o.dtype) for ct, o in zip(cotangents, outs))
        return list(pullback(cts))

    return kernel


@dataclasses.dataclass
class DerivedBackward:
    kop: KernelOp
    bwd: KernelOp  # the registered vjp op

    def __call__(self, values: list[Any], outs: list[Any], grads: list[Any]) -> list[Any]:
        fwd = self.kop.signature
        args = [v for p, v in zip(fwd.params, values) if not p.keyword_only]
        kwargs = {p.name: v for p, v in zip(fwd.params, values) if p.keyword_only}
        flat_grads = iter(self.bwd(grads, *args, **kwargs))
        result: list[Any] = []
        for p, v in zip(fwd.params, values):
            if p.kind is Kind.STATIC or v is None:
                result.append(None)
            elif p.kind is Kind.TENSOR_LIST:
                result.append([next(flat_grads) if t.is_floating_point() else None for t in v])
            else:
                result.append(next(flat_grads) if v.is_floating_point() else None)
        return result
