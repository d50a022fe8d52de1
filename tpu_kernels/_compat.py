"""Every private API the toolkit uses, in one place: torch's, JAX's, Helion's, Tokamax's,
torch_tpu's and the standard library's (argparse).

Each entry says where the name lives on the pinned versions, what the toolkit
uses it for, and what happens on a release that moved it: a fallback that keeps
results right (a slower path, or the conservative answer to "is anything
special active?"), or, where nothing can stand in, an error naming the API and
the fix. `get(name)` resolves an entry (once; later calls are a dict lookup),
`live()` says which fast paths resolved. tests/test_compat.py asserts that all of
them do on the pinned versions, and that no other module of the package imports a
private module or reads a private attribute it does not define itself (the rule is in
docs/architecture.md's decisions).

Names are resolved when first asked for, so this module imports nothing heavy
itself (torch.distributed, Helion and Tokamax stay unimported until used).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any, NamedTuple


class CompatError(RuntimeError):
    """A private API the toolkit needs is missing from the installed version of its package."""


class _NeverEqual:
    """Stands in for a dispatch keyset whose state cannot be read: each `raw_repr()`
    differs from every other, so a comparison with a saved state says "changed"."""

    def raw_repr(self) -> object:
        return object()


_NO_FALLBACK: Any = object()


class Private(NamedTuple):
    path: str  # "module:attr.attr" (no attribute part: the module itself)
    purpose: str
    fallback: Any = _NO_FALLBACK
    # where older supported releases keep the same name, tried in order after `path` (the
    # newest pinned release's place): the TPU v5e machine's JAX 0.10.2 and requirements/lock-py311.txt
    older: tuple[str, ...] = ()


_ENTRIES: dict[str, Private] = {
    # ---- dispatch state: eager.py's shortcut and checked_mode.py step aside when anything is active.
    # Without them, "something may be active" (the dispatcher's path: slower, same results).
    "torch_function_mode_enabled": Private(
        "torch._C:_is_torch_function_mode_enabled", "is a TorchFunctionMode active", lambda: True
    ),
    "torch_dispatch_stack_len": Private(
        "torch._C:_len_torch_dispatch_stack", "how many TorchDispatchModes are active", lambda: 1
    ),
    "functorch_transforms_active": Private(
        "torch._C:_are_functorch_transforms_active", "is a torch.func transform active", lambda: True
    ),
    "dispatch_tls_include": Private(
        "torch._C:_dispatch_tls_local_include_set", "the thread's included dispatch keys", _NeverEqual
    ),
    "dispatch_tls_exclude": Private(
        "torch._C:_dispatch_tls_local_exclude_set", "the thread's excluded dispatch keys", _NeverEqual
    ),
    # ---- autograd.py's kernel in the Autograd key. Without any of them autograd.py
    # registers through the public torch.library.register_autograd (slower, same results).
    "DispatchKey": Private("torch._C:DispatchKey", "dispatch keys by name", None),
    "DispatchKeySet": Private("torch._C:DispatchKeySet", "sets of dispatch keys", None),
    "after_autograd_keyset": Private("torch._C:_after_autograd_keyset", "the keys below autograd", None),
    "any_requires_grad": Private("torch._C:_any_requires_grad", "does any argument need a gradient", None),
    "AutoDispatchBelowAutograd": Private(
        "torch._C:_AutoDispatchBelowAutograd", "redispatching below the Autograd key", None
    ),
    "enable_single_level_autograd_function": Private(
        "torch._functorch.utils:enable_single_level_autograd_function",
        "an autograd.Function applied at one torch.func level",
        None,
    ),
    "SingleLevelFunction": Private(
        "torch.autograd.function:_SingleLevelFunction", "an autograd.Function at one torch.func level", None
    ),
    "supports_tensorlist": Private(
        "torch._library.autograd:supports_tensorlist", "autograd.Functions taking tensor lists", None
    ),
    "make_autograd_impl": Private(
        "torch._library.autograd:make_autograd_impl", "torch's generated autograd kernel", None
    ),
    "AutogradInfo": Private("torch._library.autograd:Info", "torch's generated autograd kernel", None),
    # ---- autocast.py: its kernels on the Autocast keys (no stand-in: autocast= needs them).
    # autograd.py: is an input's gradient asked for by the running backward pass? Without it,
    # assume it is (an input left out of `wrt` is then refused whenever it requires grad).
    "will_engine_execute_node": Private(
        "torch._C:_will_engine_execute_node", "does the running backward execute this node", lambda node: True
    ),
    "privateuse1_backend_name": Private(
        "torch._C:_get_privateuse1_backend_name", "the PrivateUse1 device's name ('tpu' under torch_tpu)"
    ),
    "ExcludeDispatchKeyGuard": Private(
        "torch._C:_ExcludeDispatchKeyGuard", "calling the op again below its autocast key"
    ),
    # ---- bridge.py: DLPack without the public wrappers (about a tenth of their cost a
    # tensor: `python bench/overhead.py`). Without them, the public jax.dlpack path.
    "jax_dlpack_import": Private(
        "jax._src.lib:_jax.dlpack_managed_tensor_to_buffer", "DLPack capsule -> jax.Array", None
    ),
    "jax_dlpack_export": Private(
        "jax._src.lib:_jax.buffer_to_dlpack_managed_tensor", "jax.Array -> DLPack capsule", None
    ),
    "torch_to_dlpack": Private("torch._C:_to_dlpack", "torch.Tensor -> DLPack capsule", None),
    "torch_from_dlpack": Private("torch._C:_from_dlpack", "DLPack capsule -> torch.Tensor", None),
    # ---- fake.py: jax.eval_shape outside torch's modes and tracing context (no stand-in:
    # a kernel source that runs torch code while tracing would see the caller's fakes).
    "disable_current_modes": Private(
        "torch.utils._python_dispatch:_disable_current_modes", "leaving torch's dispatch modes"
    ),
    "torch_tracing": Private("torch._guards:tracing", "leaving torch.compile's tracing context"),
    "no_python_dispatcher": Private(
        "torch._dispatch.python:no_python_dispatcher", "leaving the Python dispatcher"
    ),
    # ---- cpu_client.py: JAX reads its CPU dispatch flag when it makes its clients. Without
    # it, "not yet": the flag is set anyway (too late it changes nothing) and no note is given.
    "jax_backends_initialized": Private(
        "jax._src.xla_bridge:backends_are_initialized", "has JAX made its clients yet", lambda: False
    ),
    # ---- JAX's configuration: the Pallas interpreter per call (devices/jax_exec.py) and
    # the on-disk cache's key (cache/build.py).
    "jax_config": Private("jax._src.config", "JAX's thread-local configuration states"),
    "AxisEnv": Private("jax._src.core:AxisEnv", "the trace context's axis environment (cache key)"),
    # The XLA compile options JAX derives from its config (optimisation level and effort,
    # jax_disable_most_optimizations, the remat pass, ...): part of the on-disk key. Without
    # it, kernels are not stored on disk (compiled in each process: slower, same results).
    "jax_compile_options": Private(
        "jax._src.compiler:get_compile_options",
        "the XLA compile options JAX's config gives (cache key)",
        None,
    ),
    # An executable loaded from disk that calls LAPACK needs JAX's LAPACK bindings set up
    # first, which lowering does as a side effect and loading does not. Without it such
    # entries are not loaded (compiled instead: slower, same results).
    "initialize_lapack": Private(
        "jax._src.lax.linalg:initialize_lapack", "setting up LAPACK before a stored executable calls it", None
    ),
    # ---- bounds.py: a scalar-prefetch index map reads its prefetched operands as Refs; its
    # state discharged, it is a plain function of the grid indices and their values (no
    # stand-in: without it the bounds check cannot evaluate such index maps).
    "jax_discharge_state": Private(
        "jax._src.state.discharge:discharge_state", "an index map's Ref reads as a pure function"
    ),
    # ---- runtime/mosaic_precision.py: the context managers Pallas enters around every kernel
    # body it traces, module-level functions on JAX 0.10.2 and 0.12.0.1: tracing_grid_env
    # (pallas_call through GridMapping.trace_env, emit_pipeline, each index map; core_map on
    # 0.10.2) and mpmd_map_tracing_context (pl.kernel and core_map kernels on a mesh). Wrapped
    # by `wrap_pallas_kernel_tracing`; without either, traced_at traces the whole kernel at
    # the precision its Pallas bodies need (XLA dots too: more precise than asked, never refused).
    "pallas_tracing_grid_env": Private(
        "jax._src.pallas.core:tracing_grid_env", "what Pallas enters to trace a grid kernel body", None
    ),
    "pallas_mpmd_tracing_context": Private(
        "jax._src.pallas.mpmd:mpmd_map_tracing_context",
        "what Pallas enters to trace a mesh kernel body",
        None,
    ),
    # ---- mosaic_precision.py: the Mosaic lowering rule of each primitive, per TPU core type,
    # which `wrap_mosaic_dot_lowering` wraps so that a dot with no float32 operand never asks
    # Mosaic for a float32 contract precision (it refuses one: "Bad lhs type"). Without it, a
    # bf16 kernel traced at "high" or "highest" fails to compile on a TPU, as JAX ships it.
    # ---- lowering/export.py's `mosaic_modules`: reading a Mosaic module's bytecode. JAX 0.10's
    # bytecode holds Mosaic's memory-space attributes, which parse only with its TPU dialect
    # registered. Without it, the dialect stays unregistered (enough for JAX 0.12's bytecode).
    "mosaic_tpu_dialect": Private(
        "jax._src.lib:tpu", "registering Mosaic's TPU dialect in an MLIR context", None
    ),
    "mosaic_lowering_rules": Private(
        "jax._src.pallas.mosaic.lowering:lowering_rules", "Mosaic's lowering rule per primitive", None
    ),
    # ---- TPU generations: lowering/target.py and devices/tpu.py (ChipVersion and
    # get_tpu_info_for_chip are public in jax.experimental.pallas.tpu).
    "chip_version_from_device_kind": Private(
        "jax._src.tpu_info:chip_version_from_device_kind",
        "a TPU generation from a device kind",
        older=("jax._src.pallas.mosaic.tpu_info:chip_version_from_device_kind",),  # JAX 0.10.2
    ),
    # ---- symbolic.py: the size equalities a trace needs, as torch guards (no stand-in: a
    # fake cannot assume an equality torch does not check).
    "torch_check": Private("torch:_check", "establishing that two symbolic sizes are equal"),
    # ---- testing.py
    "CompileCounterWithBackend": Private(
        "torch._dynamo.testing:CompileCounterWithBackend", "counting the graphs torch.compile made"
    ),
    "dynamo_reset": Private("torch._dynamo:reset", "forgetting earlier compiles before counting graphs"),
    "mark_dynamic": Private("torch._dynamo:mark_dynamic", "marking the sizes a test varies dynamic"),
    "dynamo_counters": Private(
        "torch._dynamo.utils:counters",
        "the graphs torch.compile kept (a restarted analysis is one graph, not two)",
    ),
    # ---- sources/helion.py
    "helion_ref_mode_tls": Private(
        "helion.runtime.ref_mode:ref_mode_tls",
        "clearing Helion's reference-mode context left set by an exception (without: not cleared)",
        None,
    ),
    "helion_infer_output_spec": Private(
        "helion._compiler._dynamo.variables:infer_output_spec",
        "Helion's output shapes for symbolic sizes (the fake of a Helion op under torch.compile)",
    ),
    # ---- sources/helion_pallas.py: Helion's Pallas code generator, whose dot precision and
    # no-tiling matmul substitution `wrap_helion_pallas_backend` wraps. Without them, Helion's
    # float32 dots run at one bf16 pass whatever torch's setting, and a matmul whose blocks
    # exceed its dimensions may come back padded on a TPU (what Helion 1.5.1 ships; a warning).
    "helion_pallas_backend": Private(
        "helion._compiler.pallas.backend:PallasBackend",
        "Helion's Pallas code generation (its dot precision, its no-tiling matmul substitution)",
        None,
    ),
    "helion_compile_environment": Private(
        "helion._compiler.compile_environment:CompileEnvironment",
        "the settings of the Helion kernel being generated",
        None,
    ),
    # ---- tokamax/wrap.py
    "tokamax_disable_jaxtyping": Private(
        "tokamax._src.jaxtyping:disable_jaxtyping", "Tokamax's shape checks off for symbolic sizes"
    ),
    # ---- sharding.py and tokamax/placements.py: DTensor's rule registration
    "DTensorSpec": Private(
        "torch.distributed.tensor._dtensor_spec:DTensorSpec", "recognising a tensor's spec in a sharding rule"
    ),
    "RuntimeSchemaInfo": Private(
        "torch.distributed.tensor._op_schema:RuntimeSchemaInfo", "keying DTensor's strategy cache on statics"
    ),
    "dtensor_sharding_propagator": Private(
        "torch.distributed.tensor:DTensor._op_dispatcher.sharding_propagator", "DTensor's sharding propagator"
    ),
    # ---- runtime/devices/tpu_launch.py: a TPU kernel launched again without torch_tpu's Python
    # wrapper (`JaxCallable.__call__` binds the signature, normalises statics and builds a
    # string key on every call). Without them, every call goes through `JaxCallable` (slower,
    # same results).
    "torch_tpu_call_custom_kernel": Private(
        "torch_tpu._internal.pallas.tpu_torch_pallas:call_custom_kernel",
        "launching a registered TPU kernel on tensors",
        None,
    ),
    "torch_tpu_lookup_custom_kernel": Private(
        "torch_tpu._internal.pallas.tpu_torch_pallas:lookup_custom_kernel",
        "is a kernel still registered under its fingerprint",
        None,
    ),
    "torch_tpu_kernel_invocation_key": Private(
        "torch_tpu._internal.pallas.pallas:_get_kernel_invocation_key",
        "the key under which a JaxCallable keeps a call's fingerprint and output shapes",
        None,
    ),
    # ---- sharding/simulate.py: a rule called in one process, as DTensor calls it
    "TensorMeta": Private(
        "torch.distributed.tensor._dtensor_spec:TensorMeta", "the global shape and dtype in a simulated spec"
    ),
}

# Private names read by name rather than imported: where Tokamax keeps its api modules
# (tokamax/implementation.py reads their implementation registries), torch_tpu's
# precision module (precision.py, read from sys.modules only when torch_tpu is loaded),
# and JAX's callback logger (interpret.py quiets it in TPU-interpreter runs). tests/test_compat.py
# imports each.
TOKAMAX_OPS = "tokamax._src.ops."
TORCH_TPU_PRECISION_MODULE = "torch_tpu._internal.precision.precision_impl"
JAX_CALLBACK_LOGGER = "jax._src.callback"


# Private attributes of JAX's symbolic dimensions (fake.py turns them into torch SymInts
# without JAX's own `_evaluate`, which would specialise every symbol).
def symbolic_terms(d: Any) -> Any:
    """A JAX symbolic dimension as ((term, coefficient), ...)."""
    return _attribute(d, "_sorted_terms", "the terms of a symbolic dimension")


def term_factors(term: Any) -> Any:
    """A term of a JAX symbolic dimension as ((factor, exponent), ...)."""
    return _attribute(term, "_factors", "the factors of a symbolic dimension's term")


def local_mesh(size: int) -> Any:
    """A 1-D CPU DeviceMesh of `size` devices with no process group behind it: what the
    sharding simulation gives a rule (rules read the mesh's size, never its ranks). Built
    with DeviceMesh's private `_init_backend=False` and `_rank=0`: the public constructor
    needs an initialised process group of that size."""
    import torch
    from torch.distributed.device_mesh import DeviceMesh

    try:
        return DeviceMesh("cpu", torch.arange(size), _init_backend=False, _rank=0)
    except TypeError as e:
        raise CompatError(
            f"tpu_kernels needs DeviceMesh(..., _init_backend=False, _rank=0) (a mesh without a process "
            f"group, for the sharding simulation), which the installed torch changed ({e}). Install the "
            "versions tpu_kernels is tested with (pyproject.toml's pins)."
        ) from e


def autograd_impl(overload: Any, backward: Any, setup_context: Any) -> Any:
    """torch's generated autograd kernel for `overload` (what `register_autograd` registers),
    from its private Info record, whose fields are private keywords too."""
    return get("make_autograd_impl")(
        overload, get("AutogradInfo")(_backward_fn=backward, _setup_context_fn=setup_context)
    )


def helion_key_fn(kernel: Any) -> Any:
    """The `key=` function a Helion kernel was made with (kept as the private `_key_fn`), so
    that a variant of the kernel keeps it; None when there is none. It only groups calls for
    Helion's own config choice, so a release that moved it loses no correctness."""
    return getattr(kernel, "_key_fn", None)


def helion_tiles(kernel: Any, args: tuple, config: Any = None) -> list[tuple[int, int]]:
    """(dimension size, block size) of each dimension a Helion kernel tiles (`hl.tile`) into
    its grid for these arguments under `config` (None: its first config, or its default one), read from the
    bound kernel's config spec (`BlockSizeSpec.size_hint` and `block_id`, what Helion's
    autotuner reads) and its device IR's `grid_block_ids` (the outer `hl.tile`s: an inner
    loop's tile, such as a matmul's K, masks its partial last block and is left out). Every
    tiled dimension when this Helion keeps the grid's ids elsewhere; [] when it keeps the
    blocks elsewhere, or cannot bind the arguments (the kernel's own call then says what is
    wrong)."""
    try:
        bound = kernel.bind(args)
        spec = bound.config_spec
        if config is None:
            config = kernel.configs[0] if kernel.configs else spec.default_config()
        tiles = [
            (s.block_id, int(s.size_hint), int(config.block_sizes[s.block_id])) for s in spec.block_sizes
        ]
    except Exception:  # noqa: BLE001 - API drift or arguments Helion refuses: no check, its error
        return []
    try:
        grid = {int(i) for ids in bound.host_function.device_ir.grid_block_ids for i in ids}
    except Exception:  # noqa: BLE001 - API drift: check every tiled dimension (refuses more)
        grid = {i for i, _, _ in tiles}
    return [(size, block) for i, size, block in tiles if i in grid]


def helion_bound_config(bound: Any) -> Any:
    """The config a bound Helion kernel runs with (its private `_config`: what Helion's
    autotuning chose on the first call), for sources/helion.py to keep as the tuned variant's
    one config (no stand-in: without it the tuned config cannot be reused)."""
    return _attribute(bound, "_config", "the config Helion chose for a bound kernel")


def assume_constant_result(fn: Any) -> Any:
    """`torch.compiler.assume_constant_result` without importing torch._dynamo: the public
    decorator imports Dynamo (which imports torch.distributed.tensor, about a second here, and
    breaks the DTensor import hook's contract that a program without DTensor never loads it)
    just to set the private `_dynamo_marked_constant` flag it reads at trace time.
    tests/test_compat.py pins that the public decorator sets exactly this flag."""
    fn._dynamo_marked_constant = True
    return fn


def custom_op_function(op: Any) -> Any:
    """The function a `torch.library.custom_op` op was made from (`CustomOpDef`'s private
    `_init_fn`): for a torch_tpu `jax_op` op, its `JaxCallable`, which the TPU kernel launches
    directly (runtime/devices/tpu.py, `jax_callable`). None where a torch version keeps it
    elsewhere: the caller then calls the op, the same launch one dispatch slower."""
    return getattr(op, "_init_fn", None)


def destroy_library(lib: Any) -> None:
    """Release what a `torch.library.Library` fragment registered, now (its private
    `_destroy`): op.py calls it after a failed `define`, so that a corrected definition of
    the same name can follow. Without it, torch's finalizer releases the fragment when it is
    garbage-collected: later, same result."""
    destroy = getattr(lib, "_destroy", None)
    if destroy is not None:
        destroy()


def jax_callable_key(fn: Any, args: tuple, kwargs: dict) -> str | None:
    """The key under which torch_tpu's `JaxCallable` `fn` keeps what it derived for this call
    (the kernel's MLIR fingerprint, its output placeholders), as its `__call__` builds it (its
    private `_normalize_invocation_args` and `_get_kernel_invocation_key`); None where a
    torch_tpu version builds it otherwise."""
    key_of = get("torch_tpu_kernel_invocation_key")
    normalize = getattr(fn, "_normalize_invocation_args", None)
    if key_of is None or normalize is None:
        return None
    try:
        norm_args, norm_kwargs = normalize(args, kwargs)
        return key_of(fn.trace_key, norm_args, norm_kwargs, fn.static_argnums)
    except Exception:  # its private helpers changed shape: keep the public path
        return None


def jax_callable_launch(fn: Any, args: tuple, kwargs: dict) -> tuple[str, list, Any] | None:
    """What torch_tpu's `JaxCallable` `fn` keeps of a call it has made: (the kernel's MLIR
    fingerprint, its output placeholders, the outputs' pytree), under `jax_callable_key`. None
    where it has none for this call, or keeps them otherwise: the caller then goes on
    calling `fn`."""
    key = jax_callable_key(fn, args, kwargs)
    fingerprints = getattr(fn, "kernel_key_to_mlir_fingerprint", None)
    shapes = getattr(fn, "output_shapes", None)
    if key is None or not isinstance(fingerprints, dict) or not isinstance(shapes, dict):
        return None
    fingerprint = fingerprints.get(key)
    output_shapes, out_tree = shapes.get(key, (None, None))
    if fingerprint is None or output_shapes is None or out_tree is None:
        return None
    return fingerprint, list(output_shapes), out_tree


def torch_tpu_precision() -> tuple[Any, Any] | None:
    """torch_tpu's matmul precision as (in effect: the innermost `torch.tpu.precision` context,
    else its global; its global), from its precision module's private `_get_precision` and
    `_get_global_precision`; None while torch_tpu is not imported (read from `sys.modules`
    only: precision.py never imports it). No stand-in: a user's context would be ignored."""
    impl = sys.modules.get(TORCH_TPU_PRECISION_MODULE)
    if impl is None:
        return None
    try:
        return impl._get_precision(), impl._get_global_precision()
    except AttributeError as e:
        raise CompatError(
            f"tpu_kernels reads torch_tpu's matmul precision with {TORCH_TPU_PRECISION_MODULE}."
            f"_get_precision and _get_global_precision, which the installed torch_tpu lacks ({e}). "
            "Install the versions tpu_kernels is tested with (pyproject.toml's pins)."
        ) from e


_PALLAS_KERNEL_TRACING = ("pallas_tracing_grid_env", "pallas_mpmd_tracing_context")


def wrap_pallas_kernel_tracing(around: Any) -> bool:
    """Make Pallas enter the context manager `around()` inside its own, around each kernel body
    (and index map) it traces, in every thread: each module-level context manager of
    `_PALLAS_KERNEL_TRACING`, which Pallas looks up when it traces, is replaced by a wrapper
    (once: a second call changes nothing). False where this JAX lacks one of them (the caller
    then needs another way: some kernels would be traced unwrapped)."""
    return all([_wrap_context(name, around) for name in _PALLAS_KERNEL_TRACING])


def wrap_mosaic_dot_lowering(adjust: Any) -> bool:
    """Make Mosaic lower every `dot_general` with `precision=adjust(avals_in, precision)`: its
    rule, for each TPU core type, is replaced by a wrapper (once: a second call changes nothing).
    False where this JAX keeps its rules elsewhere."""
    rules = get("mosaic_lowering_rules")
    if not isinstance(rules, dict):
        return False
    from jax import lax

    wrapped_any = False
    for table in rules.values():
        original = table.get(lax.dot_general_p) if isinstance(table, dict) else None
        if original is None:
            continue
        wrapped_any = True
        if getattr(original, "_tpu_kernels_wrapped", False):
            continue

        def rule(
            ctx: Any, *args: Any, precision: Any = None, _original: Any = original, **params: Any
        ) -> Any:
            return _original(ctx, *args, precision=adjust(ctx.avals_in, precision), **params)

        rule._tpu_kernels_wrapped = True  # type: ignore[attr-defined]
        rule.__wrapped__ = original  # type: ignore[attr-defined]
        table[lax.dot_general_p] = rule
    return wrapped_any


def wrap_helion_pallas_backend(dot_precision: Any, keep_matmul_dot_general: Any) -> bool:
    """Make Helion's Pallas backend write `dot_precision(setting, shipped)` as the `precision=` of
    every dot it generates (`setting`: the kernel's `dot_precision` setting; `shipped`: what
    Helion writes for it), and lower a matmul whose blocks cover every dimension as
    `jax.jit(lax.dot_general)` (Helion's substitution for `pl.pallas_call`) only where Helion
    would and `keep_matmul_dot_general(tensor_shapes, block_sizes, setting)` says so (the shapes
    of the kernel's tensor arguments, the config's block sizes). Both wrap methods of Helion's
    `PallasBackend` class, for every Helion kernel generated afterwards in the process (once: a
    second call changes nothing). False where this Helion keeps them elsewhere."""
    backend, env = get("helion_pallas_backend"), get("helion_compile_environment")
    mapping = getattr(backend, "map_dot_precision", None)
    detect = getattr(backend, "_detect_matmul_dot_general_lowering", None)
    if mapping is None or detect is None or env is None:
        return False
    if getattr(mapping, "_tpu_kernels_wrapped", False):
        return True

    def map_dot_precision(precision: Any, _shipped: Any = mapping) -> str:
        return dot_precision(precision, _shipped(precision))

    def detect_matmul_dot_general(self: Any, *args: Any, _shipped: Any = detect, **kwargs: Any) -> Any:
        spec = _shipped(self, *args, **kwargs)
        if spec is None:
            return None
        try:
            setting = env.current().settings.dot_precision
            shapes = [
                tuple(int(d) for d in a.fake_value.shape)
                for a in kwargs["sorted_args"]
                if hasattr(a, "fake_value")
            ]
            blocks = [int(b) for b in kwargs["config"].block_sizes]
        except Exception:  # noqa: BLE001 - moved or symbolic: Pallas's own lowering, always right
            return None
        return spec if keep_matmul_dot_general(shapes, blocks, setting) else None

    for wrapper, original in ((map_dot_precision, mapping), (detect_matmul_dot_general, detect)):
        wrapper._tpu_kernels_wrapped = True  # type: ignore[attr-defined]
        wrapper.__wrapped__ = original  # type: ignore[attr-defined]
    backend._detect_matmul_dot_general_lowering = detect_matmul_dot_general
    backend.map_dot_precision = staticmethod(map_dot_precision)
    return True


def wrap_helion_dot_reference(wrap: Any) -> bool:
    """Make Helion's eager reference mode run `wrap(original)` for `hl.dot`, where `original` is
    the implementation Helion registered (`@_decorators.ref(dot)`, kept as the API function's
    private `_ref_fn`, which reference mode calls), once for the process (a second call changes
    nothing). False where this Helion keeps it elsewhere."""
    try:
        import helion.language as hl

        original = hl.dot._ref_fn
    except (ImportError, AttributeError):
        return False
    if original is None:
        return False
    if getattr(original, "_tpu_kernels_wrapped", False):
        return True
    wrapper = wrap(original)
    wrapper._tpu_kernels_wrapped = True
    wrapper.__wrapped__ = original
    hl.dot._ref_fn = wrapper
    return True


def _wrap_context(name: str, around: Any) -> bool:
    original = get(name)
    if original is None:
        return False
    if getattr(original, "_tpu_kernels_wrapped", False):
        return True
    import contextlib

    @contextlib.contextmanager
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with original(*args, **kwargs), around():
            yield

    wrapper._tpu_kernels_wrapped = True  # type: ignore[attr-defined]
    wrapper.__wrapped__ = original  # type: ignore[attr-defined]
    module, _, attr = _locate(_ENTRIES[name])[1].partition(":")
    setattr(importlib.import_module(module), attr, wrapper)
    _resolved[name] = wrapper
    return True


def parser_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """A parser's arguments in order, without -h/--help (argparse's private `_actions` and
    `_HelpAction`: the standard library has no public list), for the CLI reference the
    docs' generated tables hold (no stand-in: the reference would be empty)."""
    actions = _attribute(parser, "_actions", "the arguments of an argparse parser")
    return [a for a in actions if not isinstance(a, argparse._HelpAction)]


def helion_settings_copy(settings: Any, **overrides: Any) -> Any:
    """A copy of Helion `settings` with `overrides`, leaving `settings` untouched: its `copy`
    where it has one (helion 1.5, which also keeps track of which settings were explicit), else
    `dataclasses.replace` (helion 1.4 has no `copy`; 1.4 is the release that imports on torch
    2.11, which 1.5.1 does not: docs/devices.md, "Checking the CUDA path")."""
    copy = getattr(settings, "copy", None)
    if copy is not None:
        return copy(**overrides)
    import dataclasses

    return dataclasses.replace(settings, **overrides)


def _attribute(obj: Any, name: str, purpose: str) -> Any:
    try:
        return getattr(obj, name)
    except AttributeError as e:
        raise CompatError(
            f"tpu_kernels needs {type(obj).__module__}.{type(obj).__qualname__}.{name} ({purpose}), "
            f"which the installed version lacks. Install the versions tpu_kernels is tested with "
            f"(pyproject.toml's pins)."
        ) from e


_resolved: dict[str, Any] = {}


def _resolve(path: str) -> Any:
    module, _, attrs = path.partition(":")
    value = importlib.import_module(module)
    for attr in attrs.split(".") if attrs else ():
        value = getattr(value, attr)
    return value


def _locate(entry: Private) -> tuple[Any, str]:
    """(the value, the path it resolved at): `entry.path`, else each of `entry.older`; the
    error of `entry.path` when none resolves."""
    try:
        return _resolve(entry.path), entry.path
    except (ImportError, AttributeError) as first:
        for path in entry.older:
            try:
                return _resolve(path), path
            except (ImportError, AttributeError):
                continue
        raise first


def get(name: str) -> Any:
    """The private API `name` (see `_ENTRIES`), its fallback when this release lacks it, or
    CompatError naming it when nothing can stand in."""
    try:
        return _resolved[name]
    except KeyError:
        pass
    entry = _ENTRIES[name]
    try:
        value = _locate(entry)[0]
    except (ImportError, AttributeError) as e:
        if entry.fallback is _NO_FALLBACK:
            package = entry.path.split(".", 1)[0]
            raise CompatError(
                f"tpu_kernels needs {entry.path.replace(':', '.')} ({entry.purpose}), which the "
                f"installed {package} lacks ({type(e).__name__}: {e}). Install the versions "
                f"tpu_kernels is tested with (pyproject.toml's pins)."
            ) from e
        value = entry.fallback
    _resolved[name] = value
    return value


def live() -> dict[str, bool]:
    """For each entry: does the private API resolve (True), or would its fallback or error stand in."""
    out = {}
    for name, entry in _ENTRIES.items():
        try:
            _locate(entry)
            out[name] = True
        except (ImportError, AttributeError):
            out[name] = False
    return out


def all_of(*names: str) -> bool:
    """Whether every named API resolved (not its fallback): for features that need several."""
    try:
        return all(get(n) is not _ENTRIES[n].fallback for n in names)
    except CompatError:
        return False


def entries() -> dict[str, Private]:
    return dict(_ENTRIES)


__all__ = [
    "TOKAMAX_OPS",
    "CompatError",
    "Private",
    "all_of",
    "destroy_library",
    "entries",
    "get",
    "helion_bound_config",
    "helion_settings_copy",
    "helion_tiles",
    "jax_callable_key",
    "jax_callable_launch",
    "live",
    "local_mesh",
    "parser_actions",
    "symbolic_terms",
    "term_factors",
    "torch_tpu_precision",
    "wrap_helion_dot_reference",
    "wrap_helion_pallas_backend",
    "wrap_pallas_kernel_tracing",
]
