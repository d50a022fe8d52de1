"""What an op is, decided once: `OpSpec`, the frozen description every registration reads.

`KernelOp.__init__` builds the spec first (`make_spec`: the name checked, the kernel's
source made by its language, the signature parsed, the options checked and resolved into
output names, the checked-mode reference, the bucket plan, the autocast policy and the
sharding rule), then registers the op from it: the schema, one kernel per device
(`Source.kernels(spec)`: the device modules see the finished spec, never a half-built
op), the fake, autocast, sharding, autograd and vmap. Nothing is added to a spec or an op
afterwards; what a user registers later goes through the op's methods (`def_backward`,
`def_vmap`, `register_fake`), as with `torch.library`.
"""

from __future__ import annotations

import dataclasses
import keyword
from collections.abc import Callable
from typing import Any

from tpu_kernels import sharding as sharding_rules
from tpu_kernels.definition.options import OpOptions
from tpu_kernels.definition.signature import Kind, Signature, parse
from tpu_kernels.dispatch import autocast as autocast_policies
from tpu_kernels.dispatch import autograd
from tpu_kernels.dispatch import buckets as bucketing
from tpu_kernels.errors import OpDefinitionError
from tpu_kernels.tunables import Tunables, declare
from tpu_kernels.verification import tolerance


@dataclasses.dataclass(frozen=True)
class OpSpec:
    """Everything an op is, before anything is registered."""

    name: str  # "ns::op"
    ns: str
    short_name: str
    options: OpOptions  # as given (tpu_kernels.definition.options)
    source: Any  # the kernel in its language (tpu_kernels.runtime.sources): signature_fn, jax_body, kernels()
    signature: Signature
    returns_list: bool  # the schema returns Tensor[] (a derived backward of list inputs)
    output_names: tuple[str, ...]
    n_visible: int  # outputs a call returns (the rest are residuals)
    mutates_args: tuple[str, ...]
    mutated: tuple[int, ...]  # parameter indices of mutates_args, in that order
    autocast: str  # the checked policy (tpu_kernels.dispatch.autocast)
    sharding: Any  # the normalized DTensor rule (tpu_kernels.sharding), or None
    check_reference: Any  # what checked mode compares with (tolerance.resolve), or None
    bucket_plan: bucketing.Plan | None  # the dims device kernels pad (tpu_kernels.dispatch.buckets)
    # (positional, keyword-only) parameter names: how a call by name is laid out (call_op)
    call_names: tuple[tuple[str, ...], tuple[str, ...]]
    # every parameter's name in the signature's order: the values a call by name hands the
    # eager shortcut (call_op -> KernelOp.try_all)
    param_names: tuple[str, ...]
    # the statics it may tune and how calls share tuned configs (tpu_kernels.tunables), or None
    tunables: Tunables | None = None
    backward_of: Any = None  # the forward KernelOp of a backward op built by the toolkit
    # Tokamax ops (tpu_kernels.tokamax.wrap): the implementation table `call_op` resolves
    # `implementation` with, and the fake used while sizes are symbolic
    implementation_table: str | None = None
    symbolic_fake: Callable | None = None

    @property
    def fn(self) -> Callable:
        """The kernel as a JAX function of keyword arguments."""
        return self.source.jax_body

    @property
    def fn_name(self) -> str:
        return getattr(self.source.signature_fn, "__name__", self.short_name)

    @property
    def cache_size(self) -> int:
        return self.options.cache_size

    @property
    def noncontiguous(self) -> str:
        return self.options.noncontiguous

    @property
    def reference(self) -> Callable | None:
        """The differentiable JAX reference the backward is derived from, or None."""
        return self.options.reference

    @property
    def examples(self) -> Callable | None:
        return self.options.examples

    @property
    def sharding_examples(self) -> Callable | None:
        return self.options.sharding_examples


def make_spec(
    name: str,
    fn: Callable,
    options: OpOptions,
    *,
    signature: Signature | None = None,
    returns_list: bool = False,
    backward_of: Any = None,
    implementation_table: str | None = None,
    symbolic_fake: Callable | None = None,
) -> OpSpec:
    """The spec of the op `name` for the kernel `fn`; an OpDefinitionError for a bad definition."""
    ns, short_name = split_name(name)
    source = make_source(name, fn, options)
    mutates_args = tuple(options.mutates_args)
    sig = signature or parse(name, source.signature_fn, allow_no_outputs=bool(mutates_args))
    _check_options(name, sig, options, mutates_args)
    n = sig.n_outputs
    output_names = (
        tuple(options.outputs)
        if options.outputs
        else (("out",) if n == 1 else tuple(f"out{i}" for i in range(n)))
    )
    plan = (
        options.buckets
        if isinstance(options.buckets, bucketing.Plan)  # a backward op: its forward's plan
        else bucketing.plan(name, sig, output_names, options.buckets, options.length, mutates_args)
    )
    if symbolic_fake is not None and not callable(symbolic_fake):
        raise OpDefinitionError(f"{name}: symbolic_fake must be a function, got {symbolic_fake!r}.")
    params = sig.params
    if options.tune is not None and source.kind != "jax":
        raise OpDefinitionError(
            f"{name}: tune= declares statics of a JAX/Pallas kernel; a {source.kind} kernel tunes through "
            "its own autotuner (autotune=True, or op.autotune(...) ahead of time)."
        )
    tunables = declare(name, sig, options.tune, options.tune_key)
    check_reference = tolerance.resolve(name, [p.name for p in params], options.check_reference, options.reference)
    if tunables is not None and check_reference is not None:
        # tunables cannot change the result: a reference need not take them
        check_reference = tolerance.with_ignored(check_reference, *tunables.names)
    return OpSpec(
        name=name,
        ns=ns,
        short_name=short_name,
        options=options,
        source=source,
        signature=sig,
        returns_list=returns_list,
        output_names=output_names,
        n_visible=n - len(tuple(options.residuals)),
        mutates_args=mutates_args,
        mutated=tuple(sig.index(a) for a in mutates_args),
        autocast=autocast_policies.check_policy(name, options.autocast),
        sharding=sharding_rules.normalize(name, options.sharding),
        # None: unchecked, which checked mode says, except for a backward op: its forward's
        # backward check covers it
        check_reference=check_reference,
        bucket_plan=plan,
        call_names=(
            tuple(p.name for p in params if not p.keyword_only),
            tuple(p.name for p in params if p.keyword_only),
        ),
        param_names=tuple(p.name for p in params),
        tunables=tunables,
        backward_of=backward_of,
        implementation_table=implementation_table,
        symbolic_fake=symbolic_fake,
    )


def split_name(qualname: str) -> tuple[str, str]:
    """("ns", "name") of "ns::name", or an OpDefinitionError saying what is wrong with it."""
    if not isinstance(qualname, str) or qualname.count("::") != 1:
        raise OpDefinitionError(
            f"tpu_kernel: op name {qualname!r} needs exactly one namespace, as in 'mylib::my_op'."
        )
    ns, name = qualname.split("::")
    for part, what in ((ns, "namespace"), (name, "name")):
        if not part.isidentifier() or keyword.iskeyword(part):
            raise OpDefinitionError(
                f"tpu_kernel: the {what} {part!r} of {qualname!r} is not a valid identifier."
            )
    if ns in ("aten", "prim", "prims", "torch"):
        raise OpDefinitionError(f"tpu_kernel: namespace {ns!r} of {qualname!r} is reserved by torch.")
    if "." in name:
        raise OpDefinitionError(f"tpu_kernel: {qualname!r}: overload names are not supported.")
    return ns, name


def make_source(name: str, fn: Any, options: OpOptions | None = None) -> Any:
    """The kernel `fn` in its language (sources.Language), with the options that shape it."""
    from tpu_kernels.runtime import sources

    return sources.make_source(name, fn, options)


def check_differentiable(name: str, sig: Signature, mutates_args: tuple[str, ...]) -> None:
    """An OpDefinitionError unless an op of this signature can have a backward."""
    if mutates_args:
        raise OpDefinitionError(f"{name}: an op that mutates its arguments cannot have a backward.")
    if not autograd.supported(sig):
        raise OpDefinitionError(
            f"{name}: has keyword-only tensor parameters, which torch's autograd "
            "cannot differentiate; make them positional to give the op a backward."
        )


def _check_options(name: str, sig: Signature, o: OpOptions, mutates_args: tuple[str, ...]) -> None:
    if not any(p.is_tensor for p in sig.params):
        raise OpDefinitionError(f"{name}: needs at least one tensor parameter (it decides the device).")
    for a in mutates_args:
        if a not in {p.name for p in sig.params}:
            raise OpDefinitionError(f"{name}: mutates_args names '{a}', which is not a parameter.")
        if sig.params[sig.index(a)].kind is not Kind.TENSOR:
            raise OpDefinitionError(f"{name}: mutates_args names '{a}', which is not a Tensor parameter.")
    outputs = o.outputs
    if outputs is not None and len(tuple(outputs)) != sig.n_outputs:
        raise OpDefinitionError(
            f"{name}: outputs={tuple(outputs)} names {len(tuple(outputs))} outputs, but the "
            f"return annotation declares {sig.n_outputs}."
        )
    names = tuple(outputs) if outputs else ()
    residuals = tuple(o.residuals)
    if residuals:
        if not names:
            raise OpDefinitionError(f"{name}: residuals need outputs=(...) to name every output.")
        if names[len(names) - len(residuals) :] != residuals:
            raise OpDefinitionError(f"{name}: residuals {residuals} must be the last outputs of {names}.")
        if len(residuals) == len(names):
            raise OpDefinitionError(f"{name}: at least one output must not be a residual.")
    if o.backward not in (None, "vjp"):
        raise OpDefinitionError(
            f"{name}: backward={o.backward!r}; use 'vjp' to differentiate the kernel body, "
            "reference=fn to differentiate a JAX reference, or @op.def_backward."
        )
    if o.backward or o.reference is not None:
        check_differentiable(name, sig, mutates_args)
    if o.noncontiguous not in ("copy", "error"):
        raise OpDefinitionError(
            f"{name}: noncontiguous must be 'copy' or 'error', got {o.noncontiguous!r}."
        )
