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
import inspect
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import torch

from tpu_kernels import _compat
from tpu_kernels.definition.signature import Kind, parse
from tpu_kernels.dispatch import eager
from tpu_kernels.op import KernelOp
from tpu_kernels.tokamax import implementation, tuned
from tpu_kernels.tokamax.implementation import tokamax_implementation
from tpu_kernels.tokamax.placements import ByName
from tpu_kernels.tokamax.registry import FamilyExamples
from tpu_kernels.verification.tolerance import Reference, with_ignored


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
        with _compat.get("tokamax_disable_jaxtyping")() if symbolic else contextlib.nullcontext():
            return fn(*args, **kwargs)

    return body


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


def calling(tokamax_fn: Callable, declared: Callable) -> Callable:
    """A JAX body that calls `tokamax_fn` with `declared`'s arguments by name, `implementation`
    turned into what Tokamax takes; a tuple when `declared` returns several outputs.

    `declared` only gives the signature (so the parameter list is written once, and the
    forwarding call not at all); its body is not run."""
    signature = inspect.signature(declared, eval_str=True)
    several = typing.get_origin(signature.return_annotation) is tuple

    @functools.wraps(declared)
    def body(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        arguments = dict(bound.arguments)
        if "implementation" in arguments:
            arguments["implementation"] = tokamax_implementation(arguments["implementation"])
        with tuned.applied():  # Tokamax's autotuning results, when any were saved
            out = tokamax_fn(**arguments)
        return tuple(out) if several else out

    return body


def tensors_first(declared: Callable) -> Callable:
    """A stand-in for `declared` whose signature has the tensor parameters positional, in
    order, and every other parameter keyword-only: the schema of the shipped ops (torch's
    autograd differentiates positional tensors only), from a public function that takes
    some statics positionally (`top_k(scores, k)`) or tensors by keyword."""
    signature = inspect.signature(declared, eval_str=True)
    kinds = {p.name: p.kind for p in parse(getattr(declared, "__name__", "tokamax"), declared).params}
    params = list(signature.parameters.values())
    tensors = [p.replace(kind=p.POSITIONAL_OR_KEYWORD) for p in params if kinds[p.name] is not Kind.STATIC]
    statics = [p.replace(kind=p.KEYWORD_ONLY) for p in params if kinds[p.name] is Kind.STATIC]

    @functools.wraps(declared)
    def stand_in(*args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"{declared.__name__}: tensors_first() gives a signature only.")

    stand_in.__signature__ = signature.replace(parameters=tensors + statics)
    del stand_in.__wrapped__  # inspect.signature reads __signature__ then, not declared's
    return stand_in


def _with_signature(body: Callable, declared: Callable) -> Callable:
    """`body`, with `declared`'s signature (names, defaults, annotations) as the op's."""

    @functools.wraps(declared)
    def kernel(*args: Any, **kwargs: Any) -> Any:
        return body(*args, **kwargs)

    return kernel


def _family_package(declared: Callable) -> str | None:
    """The family package of a function defined in a family's `op.py` (a package laid out as
    a Tokamax family, with an `examples.py` beside it: registry.py), else None."""
    import importlib.util

    module = getattr(declared, "__module__", "") or ""
    package, _, leaf = module.rpartition(".")
    if leaf != "op" or not package:
        return None
    try:
        found = importlib.util.find_spec(f"{package}.examples") is not None
    except (ImportError, ValueError):
        found = False
    return package if found else None


def _cpu_implementation(table: str, requested: str | None) -> str | None:
    """`requested` resolved for CPU tensors, or None where it cannot run there (then the call
    goes the usual way, which raises the error naming the op)."""
    try:
        return implementation.resolve_implementation(table, "cpu", requested)
    except implementation.ImplementationError:
        return None


def call_op(op: KernelOp, arguments: Mapping[str, Any], check: Callable[[tuple], None] | None = None) -> Any:
    """Call `op` with the values its parameters name in `arguments` (a public function's
    `locals()`, after it has checked and converted them): positional parameters by position,
    keyword-only ones by keyword, as the op's schema wants them. For an op with an
    implementation table (`tokamax_op(table=)`), `implementation` is resolved by the first
    tensor's device (`resolve_implementation`: None chooses by device; a name that cannot run
    there is an error naming the op).

    `check`: the public function's argument check, given the op's values in parameter order
    (raises on bad arguments; a pure function of the tensors' shapes and dtypes and the
    statics). call_op runs it before the op, except for the same call again on the eager
    shortcut: the op's memo of its last call (same tensors unchanged, same statics) passed the
    same check, so it passes again (`KernelOp.try_all(recall_only=True)`)."""
    names, table = op.param_names, op.implementation_table
    try:
        values = [arguments[name] for name in names]
    except KeyError:
        missing = [name for name in names if name not in arguments]
        raise TypeError(f"{op.name}: call_op has no value for {missing}.") from None
    where = names.index("implementation") if table is not None and "implementation" in names else None
    if check is not None:
        # the memo's call again, before any device is read: its tensors are CPU tensors (the
        # recall checks each), so its implementation is the CPU's
        same = values
        if where is not None:
            same = values.copy()
            same[where] = _cpu_implementation(table, values[where])
        out = op.try_all(tuple(same), check, recall_only=True)
        if out is not eager.DECLINED:
            return out
    if where is not None:
        for v in values:  # the first tensor's device type (no torch.device made for a CPU one)
            if isinstance(v, torch.Tensor):
                kind = "cpu" if v.is_cpu else v.device.type
                break
        else:
            raise TypeError(
                f"{op.name}: call_op was given no tensor argument to choose an implementation by."
            )
        values[where] = implementation.resolve_implementation(table, kind, values[where])
    # every parameter named: the eager shortcut takes them as they are (KernelOp.try_all);
    # any other call goes through the op's schema as it takes them
    values = tuple(values)
    if check is not None:
        check(values)
    out = op.try_all(values, check)
    if out is not eager.DECLINED:
        return out
    positional, keyword = op.call_names
    named = dict(zip(names, values))
    return op(*[named[name] for name in positional], **{name: named[name] for name in keyword})


def public_op(
    public: Callable, *, calls: Callable | None = None, table: str | None = None, **options: Any
) -> KernelOp:
    """The torch op behind `public`, a public function of `tpu_kernels.tokamax` (it checks and
    converts the arguments, then `call_op`s this op).

    Everything that names the op comes from `public`: the op is `tokamax::<its name>`; its
    parameters are `public`'s, tensors positional and the rest keyword-only (`tensors_first`:
    autograd differentiates positional tensors); it calls `calls`, by default Tokamax's
    function of the same name in `tokamax.ops`, with the arguments by name; and its
    implementation table (`tokamax_op(table=)`) is the one of that name, or `table`.
    Other options go to `tokamax_op`.
    """
    name = public.__name__
    if calls is None:
        from tokamax import ops

        calls = getattr(ops, name)
    return tokamax_op(
        f"tokamax::{name}", calls=calls, signature=tensors_first(public), table=table or name, **options
    )


def tokamax_op(
    name: str,
    fn: Callable | None = None,
    /,
    *,
    backward: str | None = "vjp",
    symbolic_fake: Callable | None = None,
    no_vjp: Sequence[str] = (),
    calls: Callable | None = None,
    signature: Callable | None = None,
    table: str | None = None,
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
    differentiates the rest of the order. A `check_reference` ignores `implementation`.
    Other options go to `tpu_kernel`.

    To write an op's parameter list once: `signature=` takes it from another
    function (the public torch function that checks the arguments: annotate its
    tensors `torch.Tensor`), and `calls=` gives the Tokamax function to call with
    the arguments by name, so no body is needed: `tokamax_op(name, calls=ops.f,
    signature=f)` is the op. With `calls=` and a decorated function, that
    function only declares the signature. `table`: the name of the op's
    implementation table (`implementation.table`), with which `call_op` resolves
    `implementation` and whose kernels without a VJP are added to `no_vjp`.
    """
    if table is not None:
        spec = implementation.OPS.get(table)
        if spec is None:
            raise ValueError(
                f"{name}: no implementation table {table!r}; declare it with implementation.table()."
            )
        no_vjp = tuple(dict.fromkeys((*no_vjp, *spec.no_vjp)))

    def wrap(f: Callable) -> KernelOp:
        declared = signature or f
        if calls is not None:
            f = calling(calls, declared)
        elif signature is not None:
            f = _with_signature(f, signature)
        body = typecheck_concrete_only(f)
        reference = options.get("check_reference")
        if isinstance(reference, Reference):  # `implementation` chooses how, never what
            options["check_reference"] = with_ignored(reference, "implementation")
        if no_vjp and backward == "vjp":  # a given reference is stripped the same way
            options["reference"] = _differentiable(options.get("reference") or body, tuple(no_vjp))
        family = _family_package(declared)
        if family is not None:  # a shipped family's op: its example calls are in examples.py
            short = name.partition("::")[2]
            options.setdefault("examples", FamilyExamples(family, short))
            options.setdefault("sharding_examples", FamilyExamples(family, f"{short}_small"))
        rule = options.get("sharding")
        if isinstance(rule, ByName):  # a rule by parameter name learns the op's order first
            sig = parse(name, body)
            rule.bind([p.name for p in sig.params if not p.keyword_only], sig.n_outputs)
        # the implementation table and the symbolic fake are part of the op's spec
        # (tpu_kernels.spec.OpSpec); the derived backward op's fake needs no trace
        # (autograd.vjp_fake, registered by KernelOp)
        return KernelOp(
            name,
            body,
            backward=backward,
            implementation_table=table,
            symbolic_fake=symbolic_fake,
            **options,
        )

    if fn is not None or (calls is not None and signature is not None):
        return wrap(fn)
    return wrap


__all__ = [
    "call_op",
    "calling",
    "differentiable_order",
    "public_op",
    "tensors_first",
    "tokamax_op",
    "typecheck_concrete_only",
]
