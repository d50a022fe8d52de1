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

from tpu_kernels import _compat
from tpu_kernels.definition.signature import Kind, Param, Signature
from tpu_kernels.errors import NoBackwardError, OpDefinitionError
from tpu_kernels.verification import checked_mode

if TYPE_CHECKING:
    from tpu_kernels.definition.protocol import Op


def supported(sig: Signature) -> bool:
    """torch registers autograd only for ops without keyword-only tensors."""
    return not any(p.is_tensor and p.keyword_only for p in sig.params)


def register(kop: Op, lib: torch.library.Library, cpu_kernel: Callable | None = None) -> None:
    """Register the op's autograd formula; what it does is looked up at backward time,
    so `def_backward` may come after the decorator.

    `cpu_kernel`: the op's CPU kernel, for the fast path below.
    """
    params = kop.signature.params  # read once: the signature does not change after definition
    n_positional = sum(not p.keyword_only for p in params)
    no_keywords: dict = {}

    def setup_context(ctx: Any, inputs: tuple, output: Any, keyword_only_inputs: dict | None = None) -> None:
        given = keyword_only_inputs or no_keywords
        values = list(inputs) + [given.get(p.name, p.default) for p in params[len(inputs) :]]
        outs = list(output) if isinstance(output, (tuple, list)) else [output]
        flat, rebuild = _flatten(values + outs)
        ctx.save_for_backward(*flat)
        ctx.rebuild = rebuild
        ctx.n_inputs = len(values)

    def backward(ctx: Any, *grads: Any) -> tuple:
        restored = ctx.rebuild(list(ctx.saved_tensors))
        values, outs = restored[: ctx.n_inputs], restored[ctx.n_inputs :]
        if kop.backward_impl is None:
            raise NoBackwardError(
                f"{kop.name}: backward called, but the op defines no backward. Give it one: "
                f"@{kop.fn_name}.def_backward with a backward kernel, backward='vjp' when "
                "JAX can differentiate the kernel body, or reference=<a JAX function> "
                "to differentiate instead."
            )
        if isinstance(kop.backward_impl, ExplicitBackward):
            _refuse_inputs_outside_wrt(ctx, kop, kop.backward_impl.wrt, values)
        grads_in = kop.backward_impl(values, outs, list(grads[: kop.n_visible]))
        if checked_mode.ARMED:  # checked mode: the gradients against the reference's
            checked_mode.check_backward(kop, values, list(grads[: kop.n_visible]), grads_in)
        return tuple(grads_in[:n_positional])

    impl = _autograd_impl(kop, backward, setup_context)
    if impl is None or cpu_kernel is None:  # torch moved its internals: the public registration
        torch.library.register_autograd(kop.name, backward, setup_context=setup_context, lib=lib)
        return
    functorch_impl = _single_level_impl(kop, backward, setup_context)
    lib.impl(kop.short_name, _fast_path(impl, cpu_kernel, functorch_impl), "Autograd", with_keyset=True)


# The fast path's private torch APIs; without any of them, the public registration.
_FAST_PATH_LIVE = _compat.all_of(
    "DispatchKey",
    "DispatchKeySet",
    "after_autograd_keyset",
    "any_requires_grad",
    "functorch_transforms_active",
    "AutoDispatchBelowAutograd",
    "make_autograd_impl",
    "AutogradInfo",
)
if _FAST_PATH_LIVE:
    _AFTER_AUTOGRAD = _compat.get("after_autograd_keyset")
    _KeySet, _Key = _compat.get("DispatchKeySet"), _compat.get("DispatchKey")
    _CPU = _KeySet(_Key.CPU)
    # What is left below autograd of a plain CPU call: the CPU backend, and maybe
    # ADInplaceOrView (a fallthrough for ops that mutate nothing; the dispatcher
    # usually drops it before calling us).
    _PLAIN_CPU = frozenset({_CPU.raw_repr(), (_CPU | _KeySet(_Key.ADInplaceOrView)).raw_repr()})


def _fast_path(impl: Callable, cpu_kernel: Callable, functorch_impl: Callable | None = None) -> Callable:
    """The autograd kernel torch's `register_autograd` would install, plus two branches.

    When nothing needs a gradient and nothing but the CPU backend lies below
    autograd (no fake/functional/tracing mode, no other device), the dispatcher's
    next stop is certainly the CPU kernel; calling it directly skips a second
    dispatch round through Python (measured in bench/overhead.py).

    When a gradient is needed inside a torch.func transform (grad, vjp, jacrev),
    `functorch_impl` records it (see `_single_level_impl`). Every other case
    takes torch's own path, unchanged.
    """
    is_grad_enabled, any_requires_grad = torch.is_grad_enabled, _compat.get("any_requires_grad")
    functorch_active = _compat.get("functorch_transforms_active")

    def autograd_kernel(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        if not (is_grad_enabled() and any_requires_grad(*args)):
            if (keyset & _AFTER_AUTOGRAD).raw_repr() in _PLAIN_CPU:
                return cpu_kernel(*args, **kwargs)
        elif functorch_impl is not None and functorch_active():
            return functorch_impl(keyset, *args, **kwargs)
        return impl(keyset, *args, **kwargs)

    return autograd_kernel


def _single_level_impl(kop: Op, backward: Callable, setup_context: Callable) -> Callable | None:
    """The autograd kernel's body for calls inside torch.func transforms.

    torch's generated kernel applies an `autograd.Function` with an old-style
    `forward(ctx, ...)`, which functorch refuses ("must override the
    setup_context staticmethod"; `torch.library.custom_op` ops fail the same
    way): a Python autograd.Function normally runs *above* the dispatcher and
    must then handle every functorch level itself. This kernel runs *in* the
    Autograd key, where the dispatcher has already picked one grad level: its
    inputs are that level's wrappers, and its redispatch below autograd
    unwraps them, as for a built-in op's autograd kernel. functorch's own
    per-level functions are `_SingleLevelFunction`s applied with its
    single-level permission; this is one of those.
    """
    if not _compat.all_of(
        "enable_single_level_autograd_function", "supports_tensorlist", "SingleLevelFunction"
    ):
        return None  # pragma: no cover - depends on torch's internals
    enable_single_level_autograd_function = _compat.get("enable_single_level_autograd_function")
    supports_tensorlist = _compat.get("supports_tensorlist")
    below_autograd = _compat.get("AutoDispatchBelowAutograd")
    op = kop.overload
    n_positional = sum(not p.keyword_only for p in kop.signature.params)

    def forward(ctx: Any, *args: Any) -> Any:
        keyset, kwargs = args[-1].keyset, args[-1].kwargs
        args = args[:-1]
        with below_autograd():
            result = op.redispatch(keyset & _AFTER_AUTOGRAD, *args, **kwargs)
        # the dispatcher drops trailing arguments equal to their defaults; setup_context wants all
        setup_context(ctx, args, result, kwargs)
        ctx.n_args = len(args)
        return result

    def single_level_backward(ctx: Any, *grads: Any) -> tuple:
        grads_in = backward(ctx, *grads)
        if any(g is not None for g in grads_in[ctx.n_args : n_positional]):
            raise RuntimeError(
                f"{kop.name}: the backward gave a gradient for an argument the call left at its default."
            )
        return (*grads_in[: ctx.n_args], *([None] * (ctx.n_args - len(grads_in))), None)

    cls = type(
        f"{kop.short_name}_functorch",
        (_compat.get("SingleLevelFunction"),),
        {"forward": staticmethod(forward), "backward": staticmethod(single_level_backward)},
    )
    if any(p.kind is Kind.TENSOR_LIST for p in kop.signature.params) or kop.returns_list:
        cls = supports_tensorlist(cls)

    def functorch_impl(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        with enable_single_level_autograd_function():
            return cls.apply(*args, _Call(keyset, kwargs))

    return functorch_impl


class _Call:
    """The dispatch keyset and keyword-only arguments, passed through `apply` as one
    opaque value (a tuple would be flattened with the tensor arguments)."""

    __slots__ = ("keyset", "kwargs")

    def __init__(self, keyset: Any, kwargs: dict) -> None:
        self.keyset, self.kwargs = keyset, kwargs


def _autograd_impl(kop: Op, backward: Callable, setup_context: Callable) -> Callable | None:
    """torch's generated autograd kernel for this op (what `register_autograd` registers)."""
    if not _FAST_PATH_LIVE:  # pragma: no cover - depends on torch's internals
        return None
    return _compat.autograd_impl(kop.overload, backward, setup_context)


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


def check_explicit(kop: Op, bwd: Signature, wrt: tuple[str, ...]) -> None:
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


def _refuse_inputs_outside_wrt(ctx: Any, kop: Op, wrt: tuple[str, ...], values: list[Any]) -> None:
    """An input that requires grad, is not in `wrt`, and whose gradient this backward pass
    needs: raise, naming it, as torch does for an input whose derivative is not implemented
    ("the derivative for 'target' is not implemented"), instead of leaving its `.grad` None.

    Only inputs whose gradient is asked for count: `backward(inputs=...)` or
    `autograd.grad` without them, or an input that does not require grad, pass."""
    needs = getattr(ctx, "needs_input_grad", None)
    edges = getattr(ctx, "next_functions", None)
    if needs is None or edges is None:  # pragma: no cover - not an autograd.Function ctx
        return
    edge = -1  # next_functions has one entry per tensor argument of the call
    for i, (p, v) in enumerate(zip(kop.signature.params, values)):
        if i >= len(needs) or p.keyword_only:  # keyword-only tensors get no gradient anyway
            break
        if not isinstance(v, torch.Tensor):
            continue
        edge += 1
        if p.name in wrt or not needs[i] or edge >= len(edges):
            continue
        node = edges[edge][0]
        if node is not None and _gradient_needed(node):
            raise NoBackwardError(
                f"{kop.name}: the derivative for '{p.name}' is not implemented: '{p.name}' requires grad, "
                f"but the backward's wrt={wrt} leaves it out. Add '{p.name}' to "
                f"@{kop.fn_name}.def_backward(wrt=...) and return its gradient, or pass "
                f"{p.name}.detach() if it should get none."
            )


def _gradient_needed(node: Any) -> bool:
    """Whether the running backward pass executes `node` (the input's gradient is asked for)."""
    try:
        return bool(_compat.get("will_engine_execute_node")(node))
    except RuntimeError:
        # torch refuses the question for a leaf captured by autograd.grad(): one of the tensors
        # whose gradient autograd.grad returns, so it is needed.
        return True


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

    kop: Op
    bwd: Op | Composite
    wrt: tuple[str, ...]

    def __post_init__(self) -> None:
        # Where each backward parameter's value comes from, bound once by name: the
        # forward's inputs, its outputs, or an output's incoming gradient.
        fwd = self.kop.signature
        source: dict[str, tuple[int, int]] = {p.name: (0, i) for i, p in enumerate(fwd.params)}
        source.update({n: (1, j) for j, n in enumerate(self.kop.output_names)})
        source.update({f"grad_{n}": (2, j) for j, n in enumerate(self.kop.output_names)})
        params = self.bwd.signature.params
        self._args = tuple(source[p.name] for p in params if not p.keyword_only)
        self._kwargs = tuple((p.name, source[p.name]) for p in params if p.keyword_only)
        by_name = {n: k for k, n in enumerate(self.wrt)}
        self._grad_of = tuple(by_name.get(p.name) for p in fwd.params)

    def __call__(self, values: list[Any], outs: list[Any], grads: list[Any]) -> list[Any]:
        env = (values, outs, grads)
        args = [env[a][b] for a, b in self._args]
        kwargs = {name: env[a][b] for name, (a, b) in self._kwargs}
        result = self.bwd(*args, **kwargs)
        result = result if isinstance(result, tuple) else (result,)
        return [
            result[k] if k is not None and k < len(result) and values[i] is not None else None
            for i, k in enumerate(self._grad_of)
        ]


# ---- derived backward (jax.vjp) ---------------------------------------------------


def vjp_signature(fwd: Signature, qualname: str, grad_names: tuple[str, ...]) -> Signature:
    """One Tensor per incoming gradient (`grad_names`), then the forward's parameters.

    It returns one Tensor per tensor parameter of the forward (a flat schema that
    DTensor's `register_sharding` can describe); a parameter that gets no gradient
    (an absent Optional tensor, a non-floating tensor) gets an empty float32
    tensor that `DerivedBackward` turns into None. A forward with a `list[Tensor]`
    parameter keeps a `Tensor[]` return (its length is only known per call).

    The gradients come first: torch's autograd registration rejects keyword-only
    tensors, and a required parameter may not follow defaulted ones."""
    taken = {p.name for p in fwd.params} & set(grad_names)
    if taken:
        raise OpDefinitionError(
            f"{fwd.op}: parameters {sorted(taken)} clash with the derived backward's gradient "
            "parameters; rename them or the outputs (outputs=...)."
        )
    grads = tuple(
        Param(n, Kind.TENSOR, "Tensor", inspect.Parameter.empty, keyword_only=False) for n in grad_names
    )
    if returns_list(fwd):
        return Signature(qualname, grads + fwd.params, n_outputs=1, returns_tuple=False)
    n = len(fwd.tensor_params)
    return Signature(qualname, grads + fwd.params, n_outputs=n, returns_tuple=n > 1)


def returns_list(fwd: Signature) -> bool:
    """Whether the derived backward of `fwd` returns `Tensor[]` (a list parameter)."""
    return any(p.kind is Kind.TENSOR_LIST for p in fwd.params)


def vjp_kernel(fwd: Signature, diff_fn: Callable, n_visible: int, grad_names: tuple[str, ...]) -> Callable:
    """A JAX kernel computing grads of `diff_fn`'s first `n_visible` outputs with
    respect to every floating-point tensor input, in signature order (see
    `vjp_signature` for what it returns)."""
    tensor_names = [p.name for p in fwd.tensor_params]
    flat = not returns_list(fwd)

    def kernel(**kwargs: Any) -> Any:
        cotangents = [kwargs.pop(n) for n in grad_names]
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
        grads = list(pullback(cts))
        if not flat:
            return grads
        # Flat: one result per tensor parameter; None leaves vanish in tree_flatten,
        # so walk the primals (each a single array or None here).
        by_leaf = dict(zip(diff_idx, grads))
        result, k = [], 0
        for v in primals:
            if v is None:
                result.append(_NO_GRAD())
                continue
            result.append(by_leaf[k] if k in by_leaf else _NO_GRAD())
            k += 1
        return tuple(result) if len(result) > 1 else result[0]

    return kernel


def vjp_fake(fwd: Signature, bwd: Signature, n_grads: int) -> Callable:
    """The derived backward op's fake, without tracing the vjp: a gradient has the
    shape and dtype of its input (what `jax.vjp` returns), a parameter without
    one gets the empty float32 placeholder (see `vjp_signature`)."""
    flat = not returns_list(fwd)

    def like(t: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(t, memory_format=torch.contiguous_format)

    def fake(*args: Any, **kwargs: Any) -> Any:
        values = bwd.values(args, kwargs)
        device = values[0].device
        out: list[torch.Tensor] = []
        for p, v in zip(fwd.params, values[n_grads:]):
            if p.kind is Kind.STATIC:
                continue
            if p.kind is Kind.TENSOR_LIST:
                out.extend(like(t) for t in v if t.is_floating_point())
            elif v is not None and v.is_floating_point():
                out.append(like(v))
            elif flat:
                out.append(torch.empty((0,), dtype=torch.float32, device=device))
        if not flat:
            return out
        return tuple(out) if len(out) > 1 else out[0]

    return fake


def _NO_GRAD() -> jax.Array:
    """The placeholder result for a parameter without a gradient (flat schema)."""
    return jnp.zeros((0,), jnp.float32)


@dataclasses.dataclass
class DerivedBackward:
    kop: Op
    bwd: Op  # the registered vjp op

    def __post_init__(self) -> None:
        # how the forward's values are passed on, read once from its signature
        params = self.kop.signature.params
        self._positional = tuple(i for i, p in enumerate(params) if not p.keyword_only)
        self._keywords = tuple((p.name, i) for i, p in enumerate(params) if p.keyword_only)
        self._kinds = tuple(p.kind for p in params)
        self._flat = not returns_list(self.kop.signature)

    def __call__(self, values: list[Any], outs: list[Any], grads: list[Any]) -> list[Any]:
        args = [values[i] for i in self._positional]
        kwargs = {name: values[i] for name, i in self._keywords}
        results = self.bwd(*grads, *args, **kwargs)
        if self._flat:  # one result per tensor parameter
            flat = iter(results if isinstance(results, tuple) else (results,))
            out: list[Any] = []
            for kind, v in zip(self._kinds, values):
                if kind is Kind.STATIC:
                    out.append(None)
                    continue
                g = next(flat)
                out.append(g if v is not None and v.is_floating_point() else None)
            return out
        flat_grads = iter(results)
        result: list[Any] = []
        for kind, v in zip(self._kinds, values):
            if kind is Kind.STATIC or v is None:
                result.append(None)
            elif kind is Kind.TENSOR_LIST:
                result.append([next(flat_grads) if t.is_floating_point() else None for t in v])
            else:
                result.append(next(flat_grads) if v.is_floating_point() else None)
        return result
