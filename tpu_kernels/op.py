"""`@tpu_kernel`: a JAX/Pallas function -> a registered torch operator.

One `KernelOp` per decorated function. It defines `torch.ops.<ns>.<name>` with
a schema derived from the signature, and registers:

- CPU and CUDA kernels (`devices.jax_exec.JaxExecutor` over `devices.cpu` /
  `devices.cuda`), a TPU kernel (`devices.tpu.TpuKernel`, through torch_tpu),
- a fake function derived with `jax.eval_shape` (`fake.DerivedFake`),
  overridable with `register_fake`,
- an autograd formula (`autograd.register`), explicit, derived or absent.

Ops are registered directly with `torch.library.Library` rather than through
`torch.library.custom_op`: the custom_op wrapper adds Python to every call (an
aliasing check and a second call layer: bench/overhead.py) that a kernel toolkit's hot
path cannot afford; the registrations are the same ones custom_op makes.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
from collections.abc import Callable, Sequence
from typing import Any

import jax
import torch

from tpu_kernels import _compat, cpu_client
from tpu_kernels import sharding as sharding_rules
from tpu_kernels.definition import dtypes
from tpu_kernels.definition import options as options_mod
from tpu_kernels.definition.options import OpOptions
from tpu_kernels.definition.signature import Kind, Signature, parse
from tpu_kernels.dispatch import autocast as autocast_policies
from tpu_kernels.dispatch import autograd, eager, fake
from tpu_kernels.dispatch import buckets as bucketing
from tpu_kernels.dispatch import vmap as vmap_rules
from tpu_kernels.dispatch.eager_device import EagerDeviceCall
from tpu_kernels.dispatch.fake import has_symbolic
from tpu_kernels.errors import InvalidArgumentError, OpDefinitionError, UnsupportedError
from tpu_kernels.runtime import precision as precision_settings
from tpu_kernels.runtime.cache import CacheInfo
from tpu_kernels.spec import check_differentiable, make_source, make_spec
from tpu_kernels.tunables import Tuned, TunedConfig, recording
from tpu_kernels.verification import checked_mode

_REGISTRY: dict[str, KernelOp] = {}
_REGISTRY_LOCK = threading.Lock()
_is_compiling = torch.compiler.is_compiling
_PLAIN = (torch.Tensor, torch.nn.Parameter)


@functools.cache
def _tpu_host() -> bool:
    """Whether this machine shows a TPU device: only there does an op build its TPU shortcut."""
    from tpu_kernels import startup

    return startup.has_tpu_device()


def registered_ops() -> dict[str, KernelOp]:
    """Every op defined with @tpu_kernel in this process, by qualified name."""
    with _REGISTRY_LOCK:
        return dict(_REGISTRY)


def _registered_op(name: str, module: str | None = None) -> KernelOp:
    """The op registered as `name` in this process: what a copied or unpickled KernelOp is.

    A KernelOp pickles as this lookup (`KernelOp.__reduce__`), not as its state: its
    registrations belong to the process (torch's dispatcher, compiled executables) and
    cannot travel. When `name` is not registered yet, `module` (where the kernel
    function was defined) is imported first, as pickle imports a function's module.
    Saved files name this function (`tpu_kernels.op._registered_op`): keep its name and
    place, or old checkpoints stop loading.
    """
    op = _REGISTRY.get(name)
    if op is None and module:
        import importlib

        try:
            importlib.import_module(module)
        except ImportError as e:
            raise LookupError(
                f"{name}: cannot load this tpu_kernels op: it is not registered in this process "
                f"and importing its module {module!r} failed ({e}). Import the module that "
                "defines it with @tpu_kernel before loading."
            ) from e
        op = _REGISTRY.get(name)
    if op is None:
        raise LookupError(
            f"{name}: cannot load this tpu_kernels op: it is not registered in this process"
            + (f" (importing {module!r} did not define it)" if module else "")
            + ". Import or run the code that defines it with @tpu_kernel before loading."
        )
    return op


def _spec_field(field: str) -> property:
    """A read-only attribute of the op that is its spec's field (no setter: a spec is frozen)."""
    return property(lambda op: getattr(op.spec, field), doc=f"The op's spec's `{field}` (OpSpec).")


class KernelOp:
    """A kernel registered as `torch.ops.<ns>.<name>`; call it like a function.

    Calling it returns the op's outputs without its residuals; the registered
    op (`.overload`, or `torch.ops.<ns>.<name>`) returns all of them.
    """

    def __init__(
        self,
        name: str,
        fn: Callable,
        *,
        signature: Signature | None = None,
        returns_list: bool = False,
        backward_of: KernelOp | None = None,
        implementation_table: str | None = None,
        symbolic_fake: Callable | None = None,
        **options: Any,
    ) -> None:
        """`options`: tpu_kernels.definition.options.OpOptions. The rest are for the ops the toolkit
        builds itself: `signature`, `returns_list` and `backward_of` (the forward op) for
        backward ops and batched twins, `implementation_table` and `symbolic_fake` for Tokamax
        ops (tpu_kernels.spec.OpSpec says what each is)."""
        spec = self.spec = make_spec(
            name,
            fn,
            OpOptions.of(name, options),
            signature=signature,
            returns_list=returns_list,
            backward_of=backward_of,
            implementation_table=implementation_table,
            symbolic_fake=symbolic_fake,
        )
        sig = spec.signature
        # read by every call (__call__): bound once
        self._n_visible = spec.n_visible
        self._all_visible = spec.n_visible == sig.n_outputs
        self._derived_fake = fake.DerivedFake(
            sig,
            fake.jax_shape_fn(spec.fn, sig),
            n_outputs=sig.n_outputs,
            n_results=None if returns_list else sig.n_outputs + len(spec.mutated),
            returns_list=returns_list,
            source_fake=getattr(spec.source, "fake", None),
        )
        # registered later through def_backward / def_vmap / register_fake, as with torch.library
        self._user_fake: Callable | None = None
        self._backward: Any = None
        self.backward_op: KernelOp | None = None
        self._vmap_rule: Callable | None = None  # declared with def_vmap
        self._vmap_twin: KernelOp | None = None  # the derived rule's batched op, made on first use

        self.lib = self._define(spec.options.tags)
        self.overload = getattr(getattr(torch.ops, spec.ns), spec.short_name).default
        autocast_policies.register(self, self.lib, spec.autocast)
        if signature is None:  # backward ops built here get their rule from the forward
            sharding_rules.register(self, spec.sharding)
        if not spec.mutates_args and autograd.supported(sig):
            autograd.register(self, self.lib, self._kernels.get("CPU"))
        vmap_rules.register(self)
        self._eager_cpu = eager.EagerCpuCall.for_op(self)
        # on a TPU host, plain TPU calls skip the dispatcher as CPU calls do (eager_device.py)
        self._eager_tpu = EagerDeviceCall.for_op(self, "PrivateUse1", "tpu") if _tpu_host() else None
        # the tunables a call leaves out, from the op's tuning tables (tpu_kernels.tunables)
        self.tuned = (
            Tuned(
                spec.tunables,
                sig,
                _home(spec.source.signature_fn),
                self._validate_config,
                self,
                spec.autocast,
            )
            if spec.tunables is not None
            else None
        )
        o = spec.options
        if o.backward == "vjp" or o.reference is not None:
            self._derive_backward(o.reference or spec.fn)
        with _REGISTRY_LOCK:
            _REGISTRY[name] = self
        self.__doc__ = getattr(spec.source.signature_fn, "__doc__", None)
        self.__wrapped__ = fn

    # ---- the spec's fields, read-only (tpu_kernels.spec.OpSpec documents each) ----------
    name = _spec_field("name")
    ns = _spec_field("ns")
    short_name = _spec_field("short_name")
    options = _spec_field("options")
    source = _spec_field("source")
    fn = _spec_field("fn")
    fn_name = _spec_field("fn_name")
    signature = _spec_field("signature")
    returns_list = _spec_field("returns_list")
    output_names = _spec_field("output_names")
    n_visible = _spec_field("n_visible")
    mutates_args = _spec_field("mutates_args")
    mutated = _spec_field("mutated")
    autocast = _spec_field("autocast")
    sharding = _spec_field("sharding")
    reference = _spec_field("reference")
    check_reference = _spec_field("check_reference")
    bucket_plan = _spec_field("bucket_plan")
    examples = _spec_field("examples")
    sharding_examples = _spec_field("sharding_examples")
    cache_size = _spec_field("cache_size")
    noncontiguous = _spec_field("noncontiguous")
    backward_of = _spec_field("backward_of")
    call_names = _spec_field("call_names")
    param_names = _spec_field("param_names")
    implementation_table = _spec_field("implementation_table")
    symbolic_fake = _spec_field("symbolic_fake")
    tunables = _spec_field("tunables")

    # ---- what autograd.py, vmap.py and tokamax/wrap.py read (tests/test_layers.py) ----
    @property
    def backward_impl(self) -> Any:
        """How a backward call computes gradients (autograd's Explicit/DerivedBackward, vmap's
        BatchedBackward), or None when the op has no backward."""
        return self._backward

    @backward_impl.setter
    def backward_impl(self, impl: Any) -> None:
        self._backward = impl

    @property
    def cpu_kernel(self) -> Any:
        """The kernel registered for the CPU dispatch key (what the eager shortcut calls), or None."""
        return self._kernels.get("CPU")

    def device_kernel(self, dispatch_key: str) -> Any:
        """The kernel registered for a dispatch key ("CPU", "CUDA", "PrivateUse1" for the TPU),
        bucket padding included, or None."""
        return self._kernels.get(dispatch_key)

    @property
    def derived_fake(self) -> fake.DerivedFake:
        """The fake function derived with jax.eval_shape (what runs without register_fake)."""
        return self._derived_fake

    @property
    def vmap_rule(self) -> Callable | None:
        """The batching rule declared with def_vmap, or None (then the derived twin is used)."""
        return self._vmap_rule

    @property
    def vmap_twin(self) -> KernelOp | None:
        """The derived batching rule's batched op (vmap.py makes it on first use), or None."""
        return self._vmap_twin

    @vmap_twin.setter
    def vmap_twin(self, twin: KernelOp) -> None:
        self._vmap_twin = twin

    # ---- definition -----------------------------------------------------------------
    def _define(self, tags: Sequence[torch.Tag]) -> torch.library.Library:
        returns = "Tensor[]" if self.returns_list else None
        schema = self.signature.schema(mutates_args=self.mutates_args, returns=returns)
        lib = torch.library.Library(self.ns, "FRAGMENT")
        try:
            lib.define(self.short_name + schema, tags=tuple(tags))
        except RuntimeError as e:
            _compat.destroy_library(lib)
            if "already" in str(e) or "multiple times" in str(e):
                raise OpDefinitionError(
                    f"{self.name}: an operator of this name is already registered; pick "
                    "another name (names are global to the process)."
                ) from e
            raise OpDefinitionError(f"{self.name}: torch rejected the schema {schema!r}: {e}") from e
        self.schema = schema
        self._kernels = bucketing.wrap(
            self.bucket_plan, self.signature, self.source.kernels(self.spec), self._derived_fake.output_shapes
        )
        for key, kernel in self._kernels.items():
            lib.impl(self.short_name, kernel, key)
        # Where no backend kernel applies: a call with no tensor at all (`op(None)`),
        # or a device without a kernel. A clear error instead of torch's "no tensor
        # arguments" / "Could not run ... with arguments from the ... backend".
        lib.impl(self.short_name, self._no_kernel, "CompositeExplicitAutograd")
        torch.library.register_fake(self.name, self._fake, lib=lib)
        return lib

    def _validate_config(self, args: tuple, kwargs: dict) -> None:
        """Does the kernel accept this call with these statics (a trace at its shapes, at the
        matmul precision the call traces at: a kernel's blocks may fit one and not another)?
        Raises what the kernel raises; the tuned lookup falls back to the defaults then."""
        leaves = jax.tree_util.tree_leaves((args, kwargs))
        device = next((t.device.type for t in leaves if isinstance(t, torch.Tensor)), "cpu")
        with precision_settings.traced(precision_settings.current(), device):
            self.eval_shape(*args, **kwargs)

    def _no_kernel(self, *args: Any, **kwargs: Any) -> Any:
        values = self.signature.values(args, kwargs)
        self.signature.check_tensors(values)
        devices = sorted(
            {
                t.device.type + ("" if t.layout == torch.strided else f" ({t.layout})")
                for t in jax.tree_util.tree_leaves(values)
                if isinstance(t, torch.Tensor)
            }
        )
        if not devices:  # only optional tensors, all None: as the fake function says it
            raise InvalidArgumentError(
                f"{self.name}: called without any tensor argument, so its device is unknown."
            )
        raise UnsupportedError(
            f"{self.name}: no kernel for tensors on {', '.join(devices)}; "
            f"this op has kernels for {', '.join(sorted(self._kernels))}."
        )

    def _fake(self, *args: Any, **kwargs: Any) -> Any:
        if self._user_fake is not None:
            return self._user_fake(*args, **kwargs)
        symbolic = self.spec.symbolic_fake
        if symbolic is not None and has_symbolic([*args, *kwargs.values()]):
            return symbolic(*args, **kwargs)  # a trace that needs concrete sizes
        return self._derived_fake(*args, **kwargs)

    def _derive_backward(self, diff_fn: Callable) -> None:
        qualname = f"{self.name}_backward"
        grad_names = tuple(f"grad_{n}" for n in self.output_names[: self.n_visible])
        sig = autograd.vjp_signature(self.signature, qualname, grad_names)
        kernel = autograd.vjp_kernel(self.signature, diff_fn, self.n_visible, grad_names)
        wrt = [p.name for p in self.signature.tensor_params]
        plan = self.bucket_plan and bucketing.backward_plan(self.bucket_plan, sig, self.output_names, wrt)
        self.backward_op = KernelOp(
            qualname,
            kernel,
            signature=sig,
            returns_list=autograd.returns_list(self.signature),
            backward_of=self,
            buckets=plan,
        )
        self.backward_op.register_fake(autograd.vjp_fake(self.signature, sig, len(grad_names)))
        self._backward = autograd.DerivedBackward(self, self.backward_op)
        if not autograd.returns_list(self.signature):  # register_sharding cannot describe Tensor[]
            wrt = sharding_rules.backward_wrt(self.signature, self.backward_op)
            sharding_rules.register(self.backward_op, self.sharding, fwd=self, wrt=wrt)
        else:
            sharding_rules.register(self.backward_op, None, fwd=self)

    # ---- public API -----------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # The shortcut takes only statics of their schema types and dense tensors; every
        # other path checks that no static got a tensor, nor any parameter a nested tensor
        # (Signature.check_call). Under torch.compile dynamo reads is_compiling() as True and
        # traces only the dispatcher's path.
        if recording.ACTIVE:  # tpu_kernels.autotune is watching which ops a function calls
            recording.record(self, args, kwargs)
        if self.tuned is not None:  # tunables the call leaves out, as ordinary statics
            kwargs = self.tuned.fill(args, kwargs)
        checked = (
            checked_mode.ARMED and checked_mode.active()
        )  # checked mode: the dispatcher, then the reference
        out = eager.DECLINED
        if not checked and not _is_compiling():
            tpu = self._eager_tpu
            if tpu is not None and args and type(args[0]) in _PLAIN and args[0].device.type == "tpu":
                out = tpu.try_call(args, kwargs)  # the CPU shortcut would decline it
                if out is not eager.DECLINED:
                    return out  # the TPU shortcut returns the visible outputs (eager_device.py)
            else:
                if self._eager_cpu is not None:
                    out = self._eager_cpu.try_call(args, kwargs)
                if out is eager.DECLINED and tpu is not None:
                    out = tpu.try_call(args, kwargs)
                    if out is not eager.DECLINED:
                        return out
        if out is eager.DECLINED:
            self.signature.check_call(args, kwargs)
            out = checked_mode.call(self, args, kwargs) if checked else self.overload(*args, **kwargs)
        return out if self._all_visible else self._visible(out)

    def resolve_statics(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The keyword statics a call with these arguments runs with: those given, plus, for an
        op with `tune=`, the tuned values of the tunables the call leaves out (its chip's table;
        docs/autotuning.md). What the benchmark's raw-JAX baseline binds, to time the same config."""
        given = {k: v for k, v in kwargs.items() if not isinstance(v, torch.Tensor)}
        if self.tuned is None:
            return given
        filled = self.tuned.fill(args, kwargs)
        return {k: v for k, v in filled.items() if not isinstance(v, torch.Tensor)}

    def try_all(self, values: tuple, checked: Callable | None = None, recall_only: bool = False) -> Any:
        """The eager shortcut for a call that names every parameter: `values` one per
        parameter in the signature's order (`param_names`), as if each were passed by name.
        The op's (visible) result, or `eager.DECLINED` when the shortcut cannot take the call
        (then call the op as usual: the dispatcher decides). tokamax/wrap.py's `call_op` uses
        it: a public function's locals() already hold every argument. `checked` and
        `recall_only`: a public function's argument check, as `EagerCpuCall.try_all` takes it."""
        shortcut = self._eager_cpu
        if (
            shortcut is None
            or (checked_mode.ARMED and checked_mode.active())
            or _is_compiling()
            or recording.ACTIVE
        ):
            return eager.DECLINED
        out = shortcut.try_all(values, checked, recall_only)
        return out if out is eager.DECLINED else self._visible(out)

    def _visible(self, out: Any) -> Any:
        if self._all_visible:
            return out
        n = self._n_visible
        return out[0] if n == 1 else out[:n]

    def def_backward(
        self,
        fn: Callable | None = None,
        *,
        wrt: Sequence[str] | None = None,
        composite: bool = False,
        sharding: Any = None,
    ) -> Any:
        """Register `fn` as this op's backward.

        By default `fn` is a kernel (a JAX/Pallas function or a Helion kernel),
        registered as the op `<name>_backward`. With `composite=True`, `fn` is a
        plain torch function that calls other kernel ops (for a backward that
        needs several kernels); compiled graphs then show those ops.

        Its parameters are bound by name: the forward's inputs, its outputs
        (residuals included), and `grad_<output>` for each returned output. It
        returns one gradient per name in `wrt` (default: the forward's
        positional Tensor parameters), in that order.

        `sharding`: the backward op's own DTensor rule (as `tpu_kernel`'s);
        by default it is derived from the forward's (see `tpu_kernels.sharding`).
        A composite backward needs none: the ops it calls have their own.
        """

        def register(bwd_fn: Callable) -> Any:
            check_differentiable(self.name, self.signature, self.mutates_args)
            if self._backward is not None:
                raise OpDefinitionError(f"{self.name}: already has a backward.")
            names = (
                tuple(wrt)
                if wrt is not None
                else tuple(
                    p.name for p in self.signature.params if p.kind is Kind.TENSOR and not p.keyword_only
                )
            )
            qualname = f"{self.name}_backward"
            if composite and sharding is not None:
                raise OpDefinitionError(
                    f"{qualname}: a composite backward takes no sharding=; the ops it calls carry their own."
                )
            source_fn = bwd_fn if composite else make_source(qualname, bwd_fn).signature_fn
            bwd_sig = parse(qualname, source_fn)
            autograd.check_explicit(self, bwd_sig, names)
            plan = self.bucket_plan and bucketing.backward_plan(
                self.bucket_plan, bwd_sig, self.output_names, names
            )
            bwd = (
                autograd.Composite(qualname, bwd_fn, bwd_sig)
                if composite  # the ops it calls pad as they declare
                else KernelOp(qualname, bwd_fn, signature=bwd_sig, backward_of=self, buckets=plan)
            )
            self._backward = autograd.ExplicitBackward(self, bwd, names)
            self.backward_op = bwd
            if isinstance(bwd, KernelOp):
                if sharding is not None:
                    sharding_rules.register(bwd, sharding)
                else:
                    sharding_rules.register(bwd, self.sharding, fwd=self, wrt=names)
            return bwd

        return register(fn) if fn is not None else register

    def def_vmap(self, fn: Callable) -> Callable:
        """Declare this op's torch.vmap batching rule, replacing the derived one.

        `fn(info, in_dims, *args, **kwargs) -> (outputs, out_dims)`, torch's
        `register_vmap` convention: `in_dims` has one entry per positional
        argument (None where not batched); `fn` runs below the vmap level, on
        plain tensors. Declare one when JAX cannot batch the body, or when the
        op batches better by hand (e.g. by folding the batch into rows).
        """
        if not vmap_rules.supported(self.signature) or self.mutates_args:
            raise OpDefinitionError(
                f"{self.name}: torch.vmap rules need an op without keyword-only tensors that mutates nothing."
            )
        if not callable(fn):
            raise OpDefinitionError(f"{self.name}: def_vmap expects a function, got {fn!r}.")
        self._vmap_rule = fn
        return fn

    def autotune(self, *args: Any, device: str = "cpu", **kwargs: Any) -> Any:
        """Autotune a Helion kernel for these example arguments (explicitly; never implicit).

        Helion keeps the best config in its on-disk cache, keyed by shapes, dtypes,
        hardware and the kernel's source, so later processes reuse it."""
        if self.source.kind != "helion":
            raise TypeError(
                f"{self.name}: autotune() applies to Helion kernels; this op is a {self.source.kind} kernel."
            )
        return self.source.autotune(args, kwargs, device)

    def register_fake(self, fn: Callable) -> Callable:
        """Replace the derived fake function (e.g. for symbolic shapes it cannot trace)."""
        self._user_fake = fn
        return fn

    def cache_info(self, device: str | torch.device = "cpu") -> CacheInfo:
        """Hits and misses of the compiled-callable cache of one registered device type (or
        alias, or torch.device): each device whose calls tpu_kernels' own executor runs
        ("cpu", "cuda"); a TPU's calls are cached by torch_tpu."""
        from tpu_kernels.runtime import devices

        kind = getattr(device, "type", device)
        try:
            name = devices.get(kind).name
        except (KeyError, AttributeError):
            name = None
        cached = self.source.cached_devices()
        if name not in cached:
            hint = " (GPUs are 'cuda')" if kind == "gpu" else ""
            own = " or ".join(repr(c) for c in cached) or "none of this op's devices"
            others = ", ".join(d.name for d in devices.all_devices() if d.name not in cached)
            raise ValueError(
                f"{self.name}: cache_info(device={kind!r}): tpu_kernels keeps a compiled-callable "
                f"cache per device type, for {own}{hint}; calls on {others} are cached elsewhere "
                "(TPU calls are cached by torch_tpu)."
            )
        return self.source.cache_info(name)

    def cache_clear(self) -> None:
        self.source.cache_clear()
        self._derived_fake.cache.clear()

    def eval_shape(self, *args: Any, **kwargs: Any) -> Any:
        """Output ShapeDtypeStructs for example arguments (tensors or ShapeDtypeStructs)."""
        values = self.signature.bind(args, kwargs)
        tensors, statics = self.signature.split(values)
        specs = [dtypes.spec(self.name, p.name, v) for p, v in zip(self.signature.tensor_params, tensors)]
        kwargs = self.signature.static_kwargs(statics)
        with jax.enable_x64(True) if dtypes.needs_x64(specs, kwargs) else contextlib.nullcontext():
            return fake.jax_shape_fn(self.fn, self.signature)(specs, kwargs)

    def tuned_config(self, *args: Any, **kwargs: Any) -> TunedConfig:
        """The config of tunables a call with these arguments would run with, and where it comes
        from: the table entry (measured or predicted, exact, another version's or the nearest
        bucket's), the declared defaults and why, or the caller (docs/autotuning.md). The same
        lookup as the call's; nothing runs but what the lookup itself runs."""
        if self.tuned is None:
            raise ValueError(
                f"{self.name}: tuned_config() is for ops declared with tune=; this op has no tunables."
            )
        return self.tuned.explain(args, kwargs)

    def program_digest(self, *args: Any, **kwargs: Any) -> str | None:
        """The digest of the kernel's traced program for example arguments (tensors or
        ShapeDtypeStructs): the on-disk cache's key of a trace (`runtime.cache.program`), which
        a tuning entry records so that an edited kernel is not served its old choices. None
        when the program cannot be digested or traced."""
        from tpu_kernels.runtime.cache import program

        values = self.signature.bind(args, kwargs)
        tensors, statics = self.signature.split(values)
        specs = [dtypes.spec(self.name, p.name, v) for p, v in zip(self.signature.tensor_params, tensors)]
        kwargs = self.signature.static_kwargs(statics)
        names = [p.name for p in self.signature.tensor_params]
        try:
            with jax.enable_x64(True) if dtypes.needs_x64(specs, kwargs) else contextlib.nullcontext():
                closed = jax.make_jaxpr(lambda *ts: self.fn(**kwargs, **dict(zip(names, ts))))(*specs)
            return program.digest(closed)
        except Exception:  # noqa: BLE001 - Undigestible, or a trace that fails: nothing to compare
            return None

    def jax_function(
        self, *, interpret: Any = "current", matmul_precision: str = "current", **statics: Any
    ) -> Callable:
        """The kernel as a jitted JAX function of its tensor arguments, statics bound.

        Pallas calls inside run in `interpret` mode (default: the current
        tpu_kernels setting; None for none, on a real TPU), and dots at JAX
        `matmul_precision` (default: the one torch's setting gives now, as a call would
        use; see tpu_kernels.runtime.precision: the dots of its Pallas kernels at a precision
        Mosaic compiles, "highest" for "high" or three bf16 passes through
        `mosaic_precision.dot`, except on a GPU). This is what the benchmarks'
        raw-JAX baseline times: the same kernel without the bridge.
        """
        from tpu_kernels.runtime import interpret as interpret_settings
        from tpu_kernels.runtime.devices.jax_exec import pallas_interpret

        sig = self.signature
        missing = [
            p.name
            for p in sig.static_params
            if p.name not in statics and p.default is inspect.Parameter.empty
        ]
        if missing:
            raise TypeError(f"{self.name}.jax_function() needs the statics {missing}")
        values = tuple(statics.get(p.name, p.default) for p in sig.static_params)
        kwargs = sig.static_kwargs(tuple(tuple(v) if isinstance(v, list) else v for v in values))
        names = [p.name for p in sig.tensor_params]
        mode = interpret_settings.current() if interpret == "current" else interpret
        if matmul_precision == "current":
            matmul_precision = precision_settings.current()
        fn = self.fn
        cpu_client.synchronous()  # before the caller's first call makes JAX's clients

        def kernel(*tensors: Any) -> Any:
            # traced when first called, by when JAX knows its default backend
            device = jax.default_backend()
            with pallas_interpret(mode), precision_settings.traced(matmul_precision, device):
                return fn(**kwargs, **dict(zip(names, tensors)))

        return jax.jit(kernel)

    def lower(self, *args: Any, platform: str = "tpu", **kwargs: Any) -> jax.export.Exported:
        """Export the kernel for `platform` at these example shapes (no device needed)."""
        from tpu_kernels.lowering.export import export_kernel

        return export_kernel(self, args, kwargs, platform=platform)

    def __repr__(self) -> str:
        return f"<tpu_kernel {self.name}{self.schema}>"

    # ---- copies and pickling: an op is a process-wide registration, like a function ----
    def __reduce__(self) -> tuple:
        home = self
        forward = _REGISTRY.get(self.name.removesuffix("_backward"))
        if forward is not None and forward.backward_op is self:
            home = forward  # a backward op is defined by its forward's module
        return (_registered_op, (self.name, getattr(home.__wrapped__, "__module__", None)))

    def __copy__(self) -> KernelOp:
        return self

    def __deepcopy__(self, memo: dict) -> KernelOp:
        return self


def _home(fn: Callable) -> Any:
    """The folder of the module that defines `fn` (where its tuning table lives), or None."""
    from pathlib import Path

    try:
        path = inspect.getsourcefile(fn)
    except TypeError:
        return None
    return Path(path).resolve().parent if path and not path.startswith("<") else None


def tpu_kernel(name: str, fn: Callable | None = None, /, **options: Any) -> Any:
    """Register a JAX/Pallas function or a Helion kernel as the torch operator `name` ("namespace::op").

    Tensor parameters (annotated torch.Tensor or jax.Array, optionally Optional
    or list[...]) reach the function as jax.Arrays; every other parameter is a
    compile-time static passed as its Python value. The function returns a
    jax.Array or a tuple of them, matching its return annotation; an op that
    mutates arguments returns, after its outputs, the new value of each.

    The options (`outputs`, `residuals`, `mutates_args`, `backward`, `reference`,
    `check_reference`, `cache_size`, `noncontiguous`, `tags`, `examples`, `tune`, `tune_key`, `autotune`,
    `autocast`, `sharding`, `sharding_examples`, `buckets`, `length`) are documented once, in
    tpu_kernels.definition.options.OpOptions.
    """
    OpOptions.of(name, options)  # an unknown option fails here, before the decorated function

    def wrap(f: Callable) -> KernelOp:
        return KernelOp(name, f, **options)

    return wrap(fn) if fn is not None else wrap


# help(tpu_kernel) and inspect show every option with its default
tpu_kernel.__signature__ = inspect.signature(
    tpu_kernel
).replace(  # type: ignore[attr-defined]
    parameters=[
        *list(inspect.signature(tpu_kernel).parameters.values())[:2],
        *options_mod.keyword_parameters(),
    ]
)
