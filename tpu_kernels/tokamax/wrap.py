"""The generic path: any Tokamax op as a torch op, with one decorator.

    @tokamax_op("mylib::mhc_post")
    def mhc_post(x: jax.Array, residual: jax.Array, post_layer_mix: jax.Array,
                 comb_res_mix: jax.Array, *, implementation: str | None = None) -> jax.Array:
        return tokamax.ops.mhc_post(x, residual, post_layer_mix, comb_res_mix,
                                    implementation=implementation)

`tokamax_op` is `tpu_kernel(name, backward="vjp")` plus what Tokamax ops need:

- Tokamax checks its arguments' shapes with jaxtyping, which cannot compare
  symbolic sizes (torch.compile with dynamic shapes, opcheck's dynamic tests).
  The check is skipped while the body is traced with symbolic sizes (the real
  call still checks), and `symbolic_fake=` gives the output shapes for the ops
  whose trace itself needs concrete sizes.
- The derived backward op gets a fake function that needs no trace: the
  gradients have the shapes and dtypes of the floating-point inputs.
- Some of Tokamax's TPU kernels have no VJP (JAX cannot differentiate a
  `pallas_call`, and Tokamax defines none for them): `no_vjp=` names them, and
  the backward differentiates the rest of the implementation order instead
  (XLA when nothing is left), recomputing the forward with it. Found by
  `tpu-kernels check tpu_kernels.tokamax`, which lowers the backward ops for TPU.

Every op in `tpu_kernels.tokamax` is defined with it.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import torch
from tokamax._src.jaxtyping import disable_jaxtyping

from tpu_kernels.op import KernelOp, tpu_kernel


def _symbolic(arrays: Any) -> bool:
    return any(
        not all(isinstance(d, int) for d in leaf.shape)
        for leaf in jax.tree_util.tree_leaves(arrays)
        if hasattr(leaf, "shape")
    )


def typecheck_concrete_only(fn: Callable) -> Callable:
    """`fn` with Tokamax's jaxtyping checks off while its inputs have symbolic sizes."""

    @functools.wraps(fn)
    def body(*args: Any, **kwargs: Any) -> Any:
        symbolic = _symbolic((args, kwargs))
        with disable_jaxtyping() if symbolic else contextlib.nullcontext():
            return fn(*args, **kwargs)

    return body


def _tensors_symbolic(values: Any) -> bool:
    for v in values:
        for t in v if isinstance(v, (list, tuple)) else [v]:
            if isinstance(t, torch.Tensor) and any(isinstance(d, torch.SymInt) for d in t.shape):
                return True
    return False


def _register_fakes(kop: KernelOp, symbolic_fake: Callable | None) -> None:
    if symbolic_fake is not None:
        derived = kop._derived_fake  # checks the trace with concrete sizes

        def fake(*args: Any, **kwargs: Any) -> Any:
            if _tensors_symbolic(list(args) + list(kwargs.values())):
                return symbolic_fake(*args, **kwargs)
            return derived(*args, **kwargs)

        kop.register_fake(fake)
    if kop.backward_op is not None:
        kop.backward_op.register_fake(_gradient_fake(kop))


def _gradient_fake(kop: KernelOp) -> Callable:
    """The fake of a derived backward op, without tracing it (tpu_kernels.autograd.vjp_fake)."""
    from tpu_kernels import autograd

    return autograd.vjp_fake(kop.signature, kop.backward_op.signature, kop.n_visible)


def differentiable_order(implementation: str | None, no_vjp: Sequence[str]) -> str:
    """The implementation order minus the kernels without a VJP ("xla" if none is left).

    None (Tokamax's own default order, which may pick a kernel without a VJP) is "xla".
    """
    names = [n for n in (implementation or "").split(",") if n and n not in no_vjp]
    return ",".join(names) or "xla"


def _differentiable(fn: Callable, no_vjp: Sequence[str]) -> Callable:
    """`fn` with its `implementation` order stripped of kernels that have no VJP."""

    @functools.wraps(fn)
    def body(*args: Any, **kwargs: Any) -> Any:
        kwargs["implementation"] = differentiable_order(kwargs.get("implementation"), no_vjp)
        return fn(*args, **kwargs)

    return body


def tokamax_op(
    name: str,
    fn: Callable | None = None,
    /,
    *,
    backward: str | None = "vjp",
    symbolic_fake: Callable | None = None,
    no_vjp: Sequence[str] = (),
    **options: Any,
) -> Any:
    """Register `fn`, a JAX function that calls a Tokamax op, as the torch op `name`.

    Annotate tensor parameters `jax.Array` (or `torch.Tensor`, `Optional[...]`)
    and give every other argument of the Tokamax op as a static (int, float,
    bool, str, torch.dtype, list of numbers); the body turns statics into what
    Tokamax wants (a tuple, a `jax.nn` function from a name). `backward="vjp"`
    (the default) differentiates through Tokamax's own VJP; pass None for an
    op without gradients (integer outputs). `symbolic_fake`: a torch function
    giving the outputs for symbolic sizes, for ops whose trace needs concrete
    sizes. `no_vjp`: implementations whose kernel has no VJP; the backward
    differentiates the rest of the order. Other options go to `tpu_kernel`.
    """

    def wrap(f: Callable) -> KernelOp:
        body = typecheck_concrete_only(f)
        if no_vjp and backward == "vjp":  # a given reference is stripped the same way
            options["reference"] = _differentiable(options.get("reference") or body, tuple(no_vjp))
        kop = tpu_kernel(name, backward=backward, **options)(body)
        _register_fakes(kop, symbolic_fake)
        return kop

    return wrap(fn) if fn is not None else wrap


__all__ = ["tokamax_op", "typecheck_concrete_only", "differentiable_order"]
