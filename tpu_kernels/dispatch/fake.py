"""Fake (meta) functions derived from the kernel source, without running it.

`jax.eval_shape` traces the JAX function abstractly and gives the output
shapes and dtypes. Symbolic sizes (torch.compile with dynamic shapes) are
handed to JAX as symbolic dimensions (`jax.export.symbolic_shape`) and the
output sizes JAX derives are evaluated back into torch SymInts. Kernels whose
trace needs concrete sizes (a Pallas grid computed from a shape, say) cannot
be traced symbolically; the error then says how to register a fake function.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import jax
import torch

from tpu_kernels import _compat
from tpu_kernels.definition import dtypes
from tpu_kernels.definition.signature import Kind, Signature, static_key
from tpu_kernels.dispatch import symbolic
from tpu_kernels.errors import InvalidArgumentError, KernelError, wrapping
from tpu_kernels.runtime.bridge import describe
from tpu_kernels.runtime.cache import CompileCache

ShapeFn = Callable[[list[Any], dict[str, Any]], Any]
"""(tensor specs in param order, static kwargs) -> pytree of ShapeDtypeStructs."""


def jax_shape_fn(fn: Callable, sig: Signature) -> ShapeFn:
    """The ShapeFn of a JAX kernel function."""
    names = [p.name for p in sig.tensor_params]

    def shapes(specs: list[Any], statics: dict[str, Any]) -> Any:
        return jax.eval_shape(lambda *ts: fn(**statics, **dict(zip(names, ts))), *specs)

    return shapes


class DerivedFake:
    """A fake function for `torch.library.register_fake`, derived from a ShapeFn."""

    def __init__(
        self,
        sig: Signature,
        shape_fn: ShapeFn,
        *,
        n_outputs: int,
        n_results: int | None,
        returns_list: bool = False,
        maxsize: int = 512,
        source_fake: Callable[[Signature, list[Any]], Any] | None = None,
    ) -> None:
        self.sig = sig
        self.op = sig.op
        self.shape_fn = shape_fn
        self.n_outputs = n_outputs  # what the op returns
        self.n_results = n_results  # what the kernel returns (outputs + mutated values)
        self.returns_list = returns_list
        self.cache: CompileCache[tuple] = CompileCache(maxsize)
        self.source_fake = source_fake  # a source's own shape inference (Helion), used instead

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        values = self.sig.values(args, kwargs)
        tensors = [v for p, v in zip(self.sig.params, values) if p.is_tensor]
        device = _first_device(self.op, self.sig, tensors)
        statics = self.sig.static_kwargs(self.sig.split(values)[1])
        if self.source_fake is not None:
            return self._from_source(values, tensors, statics, device)
        if has_symbolic(tensors):
            outs = self._symbolic(tensors, statics)
        else:
            key = (_hashable(statics), _spec_key(tensors))
            outs = self.cache.get_or_build(key, lambda: self._concrete(tensors, statics))
        kept = outs if self.returns_list else outs[: self.n_outputs]  # not the mutated values
        made = [torch.empty(shape, dtype=dt, device=device) for shape, dt in kept]
        return self.sig.pack(made, self.returns_list)

    def output_shapes(self, values: list[Any]) -> list[tuple[int, ...]]:
        """The output shapes of a call with these concrete arguments (cached; allocates
        nothing): what a bucketed op slices its padded outputs back to."""
        tensors = [v for p, v in zip(self.sig.params, values) if p.is_tensor]
        statics = self.sig.static_kwargs(self.sig.split(values)[1])
        key = (_hashable(statics), _spec_key(tensors))
        if self.source_fake is not None:
            outs = self.cache.get_or_build(
                key,
                lambda: tuple((tuple(t.shape), t.dtype) for t in self.source_fake(self.sig, list(values))),
            )
        else:
            outs = self.cache.get_or_build(key, lambda: self._concrete(tensors, statics))
        return [shape for shape, _ in outs]

    def _from_source(self, values: Any, tensors: list[Any], statics: dict, device: torch.device) -> Any:
        def infer() -> list[Any]:
            try:
                return list(self.source_fake(self.sig, list(values)))
            except Exception as e:
                raise wrapping(e)(
                    f"{self.op}: deriving output shapes failed for {describe(tensors)}, statics "
                    f"{statics}: {type(e).__name__}: {e}"
                ) from e

        if has_symbolic(tensors):
            made = infer()
        else:
            key = (_hashable(statics), _spec_key(tensors))
            outs = self.cache.get_or_build(key, lambda: tuple((tuple(t.shape), t.dtype) for t in infer()))
            made = [torch.empty(shape, dtype=dt, device=device) for shape, dt in outs]
        return self.sig.pack(made, self.returns_list)

    def _concrete(self, tensors: list[Any], statics: dict) -> tuple:
        specs = [dtypes.spec(self.op, p.name, v) for p, v in zip(self.sig.tensor_params, tensors)]
        return self._eval(specs, statics, tensors, symbolic=False)

    def _symbolic(self, tensors: list[Any], statics: dict) -> tuple:
        """Output sizes for symbolic inputs; the equalities the trace needs become torch
        guards (tpu_kernels.dispatch.symbolic)."""
        sizes = symbolic.Sizes(tensors)
        key = ("symbolic", _hashable(statics), sizes.key)

        def trace(dims: Callable[[Any], Any]) -> tuple:
            specs = [dtypes.spec(self.op, p.name, v, dims) for p, v in zip(self.sig.tensor_params, tensors)]
            with _pallas_dynamic_blocks():
                return self._eval(specs, statics, tensors, symbolic=True)

        plan = self.cache.get_or_build(key, lambda: symbolic.plan(sizes, trace))
        return plan.apply(sizes)

    def _eval(self, specs: list[Any], statics: dict, tensors: list[Any], *, symbolic: bool) -> tuple:
        x64 = dtypes.needs_x64(specs, statics)
        try:
            # Outside torch's dispatch modes (fake, proxy tracing, functionalisation)
            # and its tracing context: a kernel source may run torch code of its own
            # while tracing (Helion's compiler does), which must not see the caller's
            # fake tensors, shape environment or graph.
            with (
                _compat.get("disable_current_modes")(),
                _compat.get("torch_tracing")(None),
                _compat.get("no_python_dispatcher")(),
                jax.enable_x64(True) if x64 else contextlib.nullcontext(),
            ):
                result = self.shape_fn(specs, statics)
        except Exception as e:
            hint = (
                " The kernel could not be traced with symbolic sizes; compile with "
                "dynamic=False, mark the sizes static (torch._dynamo.mark_static), or "
                "give the op a fake function that handles symbolic sizes with "
                "@op.register_fake."
                if symbolic
                else ""
            )
            # with symbolic sizes the failure is the tracing's (a TypeError of JAX's), not the input's
            raise (KernelError if symbolic else wrapping(e))(
                f"{self.op}: deriving output shapes with jax.eval_shape failed for "
                f"{describe(tensors)}, statics {statics}: {type(e).__name__}: {str(e).rstrip('.')}.{hint}"
            ) from e
        leaves = list(result) if isinstance(result, (tuple, list)) else [result]
        if not self.returns_list and len(leaves) != self.n_results:
            raise KernelError(
                f"{self.op}: the kernel returns {len(leaves)} arrays, but the op declares "
                f"{self.n_results} (outputs, then the new value of each mutated argument)."
            )
        return tuple((tuple(s.shape), dtypes.to_torch(self.op, s.dtype)) for s in leaves)


def _pallas_dynamic_blocks() -> contextlib.AbstractContextManager:
    """Let pallas_call accept block shapes that depend on symbolic sizes while
    deriving shapes (nothing is compiled here)."""
    try:
        from jax.experimental.pallas import pallas_export_experimental
    except ImportError:  # pragma: no cover - an experimental API, may move
        return contextlib.nullcontext()
    return pallas_export_experimental(dynamic_shapes=True)


def _first_device(op: str, sig: Signature, tensors: list[Any]) -> torch.device:
    """The device of the tensor arguments, which must all be on one device."""
    device, first = None, None
    for p, v in zip(sig.tensor_params, tensors):
        for t in v if isinstance(v, (list, tuple)) else [v]:
            if t is None:
                continue
            if device is None:
                device, first = t.device, p.name
            elif t.device != device:
                raise InvalidArgumentError(
                    f"{op}: argument '{p.name}' is on {t.device} but '{first}' is on {device}; "
                    "move all tensor arguments to one device."
                )
    if device is None:
        raise InvalidArgumentError(f"{op}: called without any tensor argument, so its device is unknown.")
    return device


def has_symbolic(values: list[Any]) -> bool:
    """Whether any tensor among `values` (tensors, lists of them, None, statics) has a
    symbolic size (torch.compile with dynamic shapes). The one place this is decided."""
    for v in values:
        for t in v if isinstance(v, (list, tuple)) else [v]:
            if isinstance(t, torch.Tensor) and any(isinstance(d, torch.SymInt) for d in t.shape):
                return True
    return False


def _spec_key(tensors: list[Any]) -> tuple:
    out = []
    for v in tensors:
        if isinstance(v, (list, tuple)):
            out.append(tuple((tuple(t.shape), t.dtype) for t in v))
        elif v is None:
            out.append(None)
        else:
            out.append((tuple(v.shape), v.dtype))
    return tuple(out)


def _hashable(statics: dict) -> tuple:
    return tuple((k, static_key(v)) for k, v in statics.items())


__all__ = ["DerivedFake", "jax_shape_fn", "Kind"]
