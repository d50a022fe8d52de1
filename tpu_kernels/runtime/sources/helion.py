"""Helion kernels: one `helion.Kernel`, a variant of it per device.

| where | what runs |
|---|---|
| CPU, mode "pallas" (default) | Helion's Pallas backend in interpret mode, as a jitted JAX function (`Kernel.jax_fn`) behind tpu_kernels' DLPack bridge |
| CPU, mode "eager" | Helion's reference mode: the kernel body as eager torch ops |
| TPU | Helion's Pallas backend, which launches through torch_tpu |
| CUDA | Helion's Triton backend |

The devices other than the CPU take their backend from `HELION_BACKENDS`.

Precision: on the Pallas backend (the CPU's "pallas" mode, the TPU, the TPU lowering check)
each Helion kernel is kept once per float32 dot precision, DEFAULT or HIGHEST
(`helion_pallas.PerPrecision`), and each call runs the one torch's setting asks for: "highest"
and "high" at HIGHEST, "medium" at DEFAULT (one bf16 pass). Helion 1.5 writes DEFAULT on
every dot whatever is asked; `helion_pallas` says how that is changed, and why a variant per
precision rather than one traced under `jax.default_matmul_precision`.

Why "pallas" is the CPU default: it runs the Pallas code Helion generates for
the TPU (through the interpreter), so a test on the CPU exercises the TPU
code generation, and once jitted it is fast (the first call pays for Helion's
code generation, later ones run the jitted program). "eager" skips code generation,
accepts float64, and helps when debugging the algorithm itself; it does not
exercise Pallas. Choose with `set_helion_cpu_mode`, `helion_cpu_mode(...)` or
TPU_KERNELS_HELION_CPU=eager.

Configs: a kernel with one `helion.Config` uses it. Autotuning runs only when
asked: `tpu_kernel(..., autotune=True)` (Helion tunes on the first call per
shape and keeps the result in its on-disk cache, so later processes reuse it)
or `op.autotune(*example_args)`. Otherwise a kernel with no config uses
Helion's default config, and one with several takes them as a preference order: on the Pallas
backend (the CPU's "pallas" mode, the TPU, the lowering check) each call runs the first whose
blocks tile its shapes (Helion's Pallas backend runs whole blocks only: a tiled dimension must
be at most its block or a multiple of it), chosen once per shape; on CUDA (Triton masks a
partial block) the first. So a kernel can list large blocks first and small ones after, and
keep large blocks wherever the shapes allow them (the shipped Helion twins do).
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable
from typing import Any

import torch

from tpu_kernels import _compat
from tpu_kernels._scoped import ScopedSetting
from tpu_kernels.errors import (
    BackendUnavailableError,
    InvalidArgumentError,
    KernelError,
    OpDefinitionError,
    wrapping,
)
from tpu_kernels.runtime import devices
from tpu_kernels.runtime.cache import CacheInfo
from tpu_kernels.runtime.devices import cpu as cpu_device
from tpu_kernels.runtime.devices import tpu as tpu_device
from tpu_kernels.runtime.devices.jax_exec import JaxExecutor
from tpu_kernels.runtime.sources import helion_eager
from tpu_kernels.runtime.sources.helion_pallas import PerPrecision

CPU_MODES = ("pallas", "eager")


def is_helion_kernel(fn: Any) -> bool:
    helion = sys.modules.get("helion")  # a Helion kernel means helion is imported already
    return helion is not None and isinstance(fn, helion.Kernel)


recognizes = is_helion_kernel  # the language registry's hooks (tpu_kernels.runtime.sources)


def make_source(op_name: str, fn: Any, options: Any) -> HelionSource:
    return HelionSource(
        op_name, fn, autotune=options.autotune, float_only=frozenset(options.float_only),
        visible_kernel=options.visible_kernel,
    )


def _check_mode(mode: str) -> str:
    if mode not in CPU_MODES:
        raise ValueError(f"Helion CPU mode must be one of {CPU_MODES}, got {mode!r}")
    return mode


_MODE = ScopedSetting(
    "tpu_kernels_helion_cpu", env="TPU_KERNELS_HELION_CPU", default="pallas", resolve=_check_mode
)


# Public functions over _MODE, like tpu_kernels.runtime.interpret's over its own: functions, not
# aliases of the methods, for their names, docstrings and types in the API.
def set_helion_cpu_mode(mode: str) -> None:
    """How Helion kernels run on CPU tensors, process-wide: "pallas" (default) or "eager"."""
    _MODE.set(mode)


def helion_cpu_mode(mode: str) -> contextlib.AbstractContextManager[None]:
    """Run Helion kernels on CPU in this mode inside the block (thread- and task-local)."""
    return _MODE.scoped(mode)


def current_cpu_mode() -> str:
    return _MODE.get()


def _require_source(name: str, fn: Callable) -> None:
    """Helion compiles a kernel from its Python source (`inspect.getsource`). A function defined
    with `python -c`, on stdin, by exec() of a string or at the plain Python prompt has none,
    and fails only at its first call (`OSError: could not get source code`): say so now."""
    import inspect

    try:
        inspect.getsource(fn)
    except (OSError, TypeError) as e:
        where = getattr(getattr(fn, "__code__", None), "co_filename", "?")
        raise OpDefinitionError(
            f"{name}: Helion reads the kernel's Python source to compile it, and "
            f"{getattr(fn, '__qualname__', fn)!s} (defined in {where}) has none: it was defined by "
            "`python -c`, stdin, exec() of a string or the Python prompt; put the kernel in a .py "
            "file and import it."
        ) from e


def variant(kernel: Any, **settings: Any) -> Any:
    """The same Helion kernel with other settings, leaving `kernel` untouched."""
    import helion

    return helion.Kernel(
        kernel.fn,
        configs=kernel.configs,
        settings=_compat.helion_settings_copy(kernel.settings, **settings),
        key=_compat.helion_key_fn(kernel),
    )


class TorchKernel:
    """A dispatch kernel that calls a Helion kernel on torch tensors."""

    def __init__(
        self, op_name: str, sig: Any, kernel: Any, device_type: str, source: HelionSource | None = None
    ) -> None:
        self.op = op_name
        self.sig = sig
        self.kernel = kernel
        self.device_type = device_type
        self.source = source  # for its dtype rule (`HelionSource.float_only`)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        values = self.sig.values(args, kwargs)
        for p, v in zip(self.sig.params, values):
            if p.is_tensor and isinstance(v, torch.Tensor) and v.device.type != self.device_type:
                raise InvalidArgumentError(
                    f"{self.op}: argument '{p.name}' is on {v.device}, but this call runs on "
                    f"{self.device_type}; move all tensor arguments to one device."
                )
        try:
            if self.source is not None and self.source.float_only:
                self.source.check_float(values)
            out = self.kernel(*values)
        except Exception as e:
            _reset_ref_mode()
            raise wrapping(e)(  # its dtype check and Helion's refusals keep their kind
                f"{self.op}: the Helion kernel failed on {self.device_type}: {type(e).__name__}: {e}"
            ) from e
        return _fresh(out, values)


def _fresh(out: Any, inputs: list[Any]) -> Any:
    """Clone any output that is an input (torch ops may not return aliases)."""
    ptrs = {t.data_ptr() for t in inputs if isinstance(t, torch.Tensor)}
    if isinstance(out, tuple):
        return tuple(o.clone() if o.data_ptr() in ptrs else o for o in out)
    return out.clone() if out.data_ptr() in ptrs else out


def _reset_ref_mode() -> None:
    """Helion leaves its reference-mode context set after an exception inside it,
    and every later reference-mode call in the thread fails; clear it."""
    tls = _compat.get("helion_ref_mode_tls")
    if tls is not None:  # pragma: no branch - None only where Helion moved it
        tls.context = None


class CpuKernel:
    """CPU: Helion's Pallas interpret mode through the JAX bridge, or its eager reference mode."""

    def __init__(
        self, source: HelionSource, pallas: JaxExecutor, eager: TorchKernel, reference: Callable | None = None
    ) -> None:
        self.source = source
        self.pallas = pallas
        self.eager = eager
        self.reference = reference  # the op's JAX reference, if it has one

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        values = self.pallas.sig.values(args, kwargs)
        if any(isinstance(v, torch.Tensor) and v.numel() == 0 for v in values):
            return self._zero_size(values)
        if current_cpu_mode() == "eager":
            return self.eager(*args, **kwargs)
        if self.source.autotune_enabled:
            # Helion's autotuner needs real tensors, which the JAX path does not have.
            self.source.ensure_tuned(self.pallas.sig.values(args, kwargs))
        self.source.check_tiles(values)
        return self.pallas(*args, **kwargs)

    def _zero_size(self, values: list[Any]) -> Any:
        """A call with a zero-size tensor. Helion cannot launch a zero-size grid ("All
        elements in the grid must be strictly positive") nor trace a reduction over a
        zero-size row, so such a call runs what torch's own op would: the op's JAX
        reference when it has one (on the CPU, through the bridge), else the kernel
        body as eager torch (Helion's reference mode), which handles the rest of the
        shipped kernels' cases (an empty K gives zeros, an empty row an empty output)."""
        if self.source.float_only:
            self.source.check_float(values)
        if self.reference is None:
            return self.eager(*values)
        import jax

        from tpu_kernels.runtime import bridge

        sig = self.pallas.sig
        kwargs = {
            p.name: (bridge.to_jax_cpu(v.contiguous()) if isinstance(v, torch.Tensor) else v)
            for p, v in zip(sig.params, values)
        }
        x64 = any(getattr(v, "dtype", None) in (torch.float64, torch.int64) for v in values)
        with jax.enable_x64(True) if x64 else contextlib.nullcontext():
            out = self.reference(**kwargs)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        torch_outs = tuple(torch.from_dlpack(jax.numpy.array(o, copy=True)).clone() for o in outs)
        return torch_outs if isinstance(out, (tuple, list)) else torch_outs[0]


def _is_float(dtype: Any) -> bool:
    """torch or JAX dtype -> is it floating point."""
    if isinstance(dtype, torch.dtype):
        return dtype.is_floating_point
    import jax.numpy as jnp

    return bool(jnp.issubdtype(dtype, jnp.floating))


def _shape_key(values: list[Any]) -> tuple:
    """(shape, dtype) of each array or tensor argument and the value of the others:
    the same key for torch tensors and the JAX arrays the bridge makes of them."""
    key = []
    for v in values:
        if hasattr(v, "shape") and hasattr(v, "dtype"):
            key.append((tuple(v.shape), str(v.dtype).removeprefix("torch.")))
        else:
            key.append(v)
    return tuple(key)


# Helion's backend on each device that has one, by the device's name (tpu_kernels.runtime.devices):
# every Helion op gets a kernel on the device's dispatch key, built on its first call. The
# CPU is not here: it runs Helion's Pallas backend in interpret mode or its eager reference
# mode (CpuKernel). A Helion backend for another device is one entry here.
HELION_BACKENDS: dict[str, str] = {"cuda": "triton", "tpu": "pallas"}


def _require_backend(backend: str, op: str, device: str) -> None:
    """BackendUnavailableError naming what Helion's `backend` needs on `device` and is missing
    in this process (without it Helion fails at the first call with its own error)."""
    if backend == "pallas":
        tpu_device.torch_tpu_pallas()  # Helion's Pallas backend launches through torch_tpu
    elif backend == "triton" and sys.modules.get("triton") is None:  # None: import blocked
        try:
            import triton  # noqa: F401
        except ImportError as e:
            raise BackendUnavailableError(
                f"{op}: {device.upper()} tensors need Triton for Helion ({e})"
            ) from e


class HelionSource:
    kind = "helion"

    def __init__(
        self, name: str, kernel: Any, *, autotune: bool = False, float_only: frozenset[str] = frozenset(),
        visible_kernel: Any = None,
    ) -> None:
        from helion.runtime.settings import RefMode

        _require_source(name, kernel.fn)
        # the kernel a TPU call that needs no gradient launches: the visible outputs alone
        self.visible = _visible_source(name, kernel, visible_kernel, autotune, float_only)
        helion_eager.install()  # hl.dot in reference mode on CPU tensors (helion_eager says why)
        self.name = name
        self.kernel = kernel
        self.signature_fn = kernel.fn
        self.autotune_enabled = autotune
        overrides: dict[str, Any] = {}
        configs = list(kernel.configs)
        # Without autotuning, several configs are a preference order (the module's docstring):
        # the variants below are made with the first, and `ByShape` makes one per other config a
        # call's shapes need.
        self.configs: list[Any] = configs if not autotune and len(configs) > 1 else configs[:1]
        if not autotune:
            if not configs:
                overrides["autotune_effort"] = "none"
            elif len(configs) > 1:
                kernel = _with_config(kernel, configs[0])
        self._overrides = overrides
        # The Pallas backend's variants: one per float32 dot precision (helion_pallas.PerPrecision).
        # Interpret mode runs on the CPU, and the same code through Helion's own launcher on CPU
        # tensors is what a TPU launches, less torch_tpu (tests/kernels/test_helion.py).
        self.interpret_variants = self._pallas_variants(kernel, interpret=True, **overrides)
        self.interpret = self.interpret_variants.at("default")  # shapes and tiles: any precision's
        self.eager = variant(kernel, ref_mode=RefMode.EAGER, pallas_interpret=False, **overrides)
        # device name -> the kernel on Helion's backend for it (HELION_BACKENDS); per precision
        # on the Pallas backend
        self.device_variants: dict[str, Any] = {
            name: self._pallas_variants(kernel, interpret=False, **overrides)
            if backend == "pallas"
            else variant(kernel, backend=backend, pallas_interpret=False, ref_mode=RefMode.OFF, **overrides)
            for name, backend in HELION_BACKENDS.items()
        }
        # The TPU lowering check (`tpu-kernels check`) lowers Helion's Pallas code for a TPU
        # whichever devices the table lists: the TPU's variants, or the same settings.
        tpu = self.device_variants.get("tpu")
        self.tpu_variant = (
            tpu
            if isinstance(tpu, PerPrecision)
            else self._pallas_variants(kernel, interpret=False, **overrides)
        )
        # (where, config index) -> the Pallas variants with that config ("interpret", or a
        # device's name, or "lowering"), the first config's made above
        self._by_config: dict[tuple[str, int], PerPrecision] = {
            ("interpret", 0): self.interpret_variants,
            ("lowering", 0): self.tpu_variant,
            **{(n, 0): v for n, v in self.device_variants.items() if isinstance(v, PerPrecision)},
        }
        self._by_config_lock = threading.Lock()
        self._fitted: dict[tuple, int] = {}  # shape key -> the index of the config it runs
        # shape key -> the interpret variants with the config tuned for that shape
        self._tuned: dict[tuple, PerPrecision] = {}
        self._tiles_ok: set[tuple] = set()  # shape keys whose tiling check_tiles passed
        self.jax_body = self._body(lambda args: self._interpret_for(args).traced())
        self.lowering_body = self._lowering_body()
        self._pallas: JaxExecutor | None = None
        # Parameters that must be floating point (the shipped kernels compute in float32 and
        # refuse integers, docs/dtypes.md); Helion's host code cannot raise, so the check is here.
        unknown = sorted(float_only - set(_param_names(kernel.fn)))
        if unknown:
            raise OpDefinitionError(f"{name}: float_only names {unknown}, which are not parameters.")
        self.float_only = float_only

    @staticmethod
    def _pallas_variants(kernel: Any, *, interpret: bool, **settings: Any) -> PerPrecision:
        """`kernel` on Helion's Pallas backend, once per float32 dot precision."""
        from helion.runtime.settings import RefMode

        return PerPrecision(
            lambda p: variant(
                kernel,
                backend="pallas",
                pallas_interpret=interpret,
                ref_mode=RefMode.OFF,
                dot_precision=p,
                **settings,
            )
        )

    def check_float(self, values: list[Any]) -> None:
        """Raise the shipped ops' integer-input error for a `float_only` parameter."""
        from tpu_kernels.definition.dtypes import FLOAT_DTYPES_TEXT

        short = self.name.split("::")[-1]
        for n, v in zip(_param_names(self.kernel.fn), values):
            dtype = getattr(v, "dtype", None)
            if n in self.float_only and dtype is not None and not _is_float(dtype):
                raise TypeError(
                    f"{short}: argument '{n}' has dtype {str(dtype).removeprefix('torch.')}; {short} "
                    f"computes in floating point and accepts {FLOAT_DTYPES_TEXT}. Convert it first "
                    "(for example x.float())."
                )

    def config_index(self, values: list[Any]) -> int:
        """The index in `configs` of the config a call with these arguments (torch tensors or
        JAX arrays) runs on the Pallas backend: the first whose blocks tile every grid dimension
        (`_fits`), or the first when none does (its call then fails `check_tiles`). Chosen once
        per shape key."""
        if len(self.configs) < 2:
            return 0
        key = _shape_key(values)
        index = self._fitted.get(key)
        if index is None:
            kernel, args = self.interpret_variants.at("default"), _host_like(values)
            index = next(
                (i for i, c in enumerate(self.configs) if _fits(_compat.helion_tiles(kernel, args, c))), 0
            )
            if len(self._fitted) >= 1024:  # bounded, like the executors' caches
                self._fitted.clear()
            self._fitted[key] = index
        return index

    def variants(self, where: str, index: int) -> PerPrecision:
        """The Pallas variants with config `index` for `where` ("interpret", "lowering", or a
        device whose Helion backend is Pallas), made on first use."""
        got = self._by_config.get((where, index))
        if got is None:
            with self._by_config_lock:
                got = self._by_config.get((where, index))
                if got is None:
                    kernel = _with_config(self.kernel, self.configs[index])
                    got = self._by_config[(where, index)] = self._pallas_variants(
                        kernel, interpret=where == "interpret", **self._overrides
                    )
        return got

    def _interpret_for(self, values: list[Any]) -> PerPrecision:
        """The interpret variants a call with these arguments runs: its tuned config when
        autotuning chose one, else its `config_index`."""
        tuned = self._tuned.get(_shape_key(values))
        return tuned if tuned is not None else self.variants("interpret", self.config_index(values))

    def check_tiles(self, values: list[Any]) -> None:
        """InvalidArgumentError for a call Helion's Pallas backend cannot tile: Helion 1.5 runs
        every grid `hl.tile` dimension (an outer tile; an inner loop's tile masks its last
        block) in whole blocks of the config's size, so a dimension larger than its block
        must be a multiple of it (its partial last block fails deep in JAX with
        "Shapes must be 1D sequences of concrete values"). Checked once per shape."""
        key = _shape_key(values)
        if key in self._tiles_ok:
            return
        kernel = self._interpret_for(values).at("default")  # the same tiles at each precision
        for size, block in _compat.helion_tiles(kernel, _host_like(values)):
            if size > block and size % block:
                shapes = ", ".join(
                    f"{n}={list(v.shape)}"
                    for n, v in zip(_param_names(self.kernel.fn), values)
                    if isinstance(v, torch.Tensor)
                )
                raise InvalidArgumentError(
                    f"{self.name}: {shapes}: the Helion kernel tiles a dimension of size {size} in "
                    f"blocks of {block}, and Helion's Pallas backend runs whole blocks only: a tiled "
                    f"dimension must be at most {block} or a multiple of it. Pad the input to a "
                    f"multiple of {block}, give the kernel a block that divides {size} (its "
                    "helion.Config), or run on CPU in Helion's eager mode "
                    "(tpu_kernels.helion_cpu_mode('eager'))."
                )
        if len(self._tiles_ok) >= 1024:  # bounded, like the executors' caches
            self._tiles_ok.clear()
        self._tiles_ok.add(key)

    def _body(self, pick: Callable[[list[Any]], Any]) -> Callable:
        names = list(_param_names(self.kernel.fn))
        op = self.name

        def body(**kwargs: Any) -> Any:
            args = [kwargs[n] for n in names]
            if self.float_only:
                self.check_float(args)
            k = pick(args)
            for n, a in zip(names, args):
                # Helion's Pallas backend has no 64-bit types; its JAX path does not check
                # and (Helion 1.5, JAX 0.12) loops forever inferring a float64 tiling.
                if str(getattr(a, "dtype", "")) in ("float64", "int64", "uint64"):
                    raise NotImplementedError(  # valid input, unsupported here: UnsupportedError
                        f"{op}: argument '{n}' is {a.dtype}, which Helion's Pallas backend does not "
                        "support; use 32-bit types, or run on CPU in Helion's eager mode "
                        "(tpu_kernels.helion_cpu_mode('eager'))."
                    )
            return k.jax_fn(*args)

        body.__name__ = getattr(self.kernel.fn, "__name__", "helion_kernel")
        return body

    def _lowering_body(self) -> Callable:
        """The TPU variant's JAX function (the check lowers it under an abstract TPU mesh), at the
        precision it is traced at."""
        return self._body(lambda args: self.variants("lowering", self.config_index(args)).traced())

    def kernels(self, spec: Any) -> dict[str, Callable]:
        if spec.mutates_args:
            raise OpDefinitionError(f"{spec.name}: mutating Helion kernels are not supported yet.")
        self._pallas = JaxExecutor(
            spec.signature,
            self.jax_body,
            cpu_device.TRANSFER,
            n_outputs=spec.signature.n_outputs,
            maxsize=spec.cache_size,
            noncontiguous=spec.noncontiguous,
        )
        cpu = CpuKernel(
            self,
            self._pallas,
            TorchKernel(spec.name, spec.signature, self.eager, "cpu", self),
            spec.reference,
        )
        out: dict[str, Callable] = {devices.get("cpu").dispatch_key: cpu}
        if self.visible is not None and spec.n_visible == spec.signature.n_outputs:
            raise OpDefinitionError(
                f"{spec.name}: visible_kernel= is the kernel without the op's residuals, but the op "
                "declares none (residuals=)."
            )
        for name, backend in HELION_BACKENDS.items():  # the devices Helion has a backend for
            device = devices.get(name)
            variants = self.device_variants[name]
            visible = None
            if isinstance(variants, PerPrecision):  # Pallas: the config by the call's shapes
                variants = ByShape(self, name)
                if self.visible is not None:
                    visible = TorchKernel(spec.name, spec.signature, ByShape(self.visible, name), device.name, self)
            kernel = TorchKernel(spec.name, spec.signature, variants, device.name, self)
            out[device.dispatch_key] = _BackendChecked(kernel, backend, visible, spec.n_visible)
        return out

    def fake(self, sig: Any, values: list[Any]) -> Any:
        """Output fakes from Helion's own shape inference (a private API, which Helion's
        torch.compile integration uses too). jax.eval_shape of `jax_fn` also gives
        shapes, but Helion's code generation fails inside torch.compile's tracing
        context; this path was built for it, and handles symbolic sizes."""
        try:
            infer_output_spec = _compat.get("helion_infer_output_spec")
        except _compat.CompatError as e:  # pragma: no cover - depends on Helion's internals
            raise KernelError(
                f"{self.name}: this Helion version offers no shape inference for symbolic sizes ({e})"
            ) from e
        spec = infer_output_spec(self.interpret, tuple(values))
        device = next(v.device for v in values if isinstance(v, torch.Tensor))
        outs = [
            torch.empty_strided(s["shape"], s["stride"], dtype=s["dtype"], device=device)
            for s in spec["leaf_specs"]
        ]
        return outs

    def ensure_tuned(self, values: list[Any], *, asked: bool = False) -> None:
        """Autotune the CPU (interpret) variant for these real arguments, once per shape.

        Helion's on-disk cache makes this a lookup in later processes. The tuned
        config is kept as a variant with that single config, which the JAX path
        (`jax_fn`, no real data) then compiles without tuning again. `asked`: an explicit
        `op.autotune(...)`, which tunes even an op declared without autotune=True (whose
        own variants never search: Helion's `autotune_effort="none"`)."""
        import helion
        from helion.runtime.settings import RefMode

        key = _shape_key(values)
        if key in self._tuned:
            return
        tuner = self.interpret_variants.current()
        if asked and not self.autotune_enabled:
            tuner = variant(
                self.kernel,
                backend="pallas",
                pallas_interpret=True,
                ref_mode=RefMode.OFF,
                dot_precision=tuner.settings.dot_precision,
            )
        # A first call on real tensors goes through Helion's own autotuning entry point,
        # which reads and writes its on-disk cache (an explicit Kernel.autotune does not).
        tuner(*values)
        config = _compat.helion_bound_config(tuner.bind(tuple(values)))
        settings = self.interpret.settings
        self._tuned[key] = PerPrecision(
            lambda p: helion.Kernel(
                self.kernel.fn,
                configs=[config],
                settings=_compat.helion_settings_copy(settings, dot_precision=p),
                key=_compat.helion_key_fn(self.kernel),
            )
        )

    def autotune(self, args: tuple, kwargs: dict, device: str = "cpu") -> Any:
        """Tune the variant that runs on `device` for these arguments; Helion caches the result."""
        if device == "cpu":
            values = self.interpret.normalize_args(*args, **kwargs)
            self.ensure_tuned(list(values), asked=True)
            self.cache_clear()  # executables built before with the default config: rebuilt with it
            return self._tuned[_shape_key(list(values))].at("default").configs[0]
        k = self.device_variants.get(device)
        if k is None:
            known = ", ".join(["cpu", *self.device_variants])
            raise ValueError(f"{self.name}: autotune(device={device!r}): Helion kernels run on {known}.")
        if isinstance(k, PerPrecision):  # the variant a call at torch's precision now runs
            k = k.current()
        return k.autotune(k.normalize_args(*args, **kwargs), force=False)

    def cached_devices(self) -> tuple[str, ...]:
        return () if self._pallas is None else ("cpu",)  # Helion caches its other backends itself

    def cache_info(self, device: str) -> CacheInfo:
        if device != "cpu" or self._pallas is None:
            raise ValueError(f"{self.name}: only the CPU Pallas path keeps a tpu_kernels cache")
        return self._pallas.cache.info()

    def cache_clear(self) -> None:
        if self._pallas is not None:
            self._pallas.cache.clear()


class ByShape:
    """A device's Pallas kernel that runs, per call, the source's config for the call's shapes
    (`HelionSource.config_index`) at torch's precision now, after `check_tiles` (not for a kernel
    Helion autotunes: its tiles are the tuned config's), with its statics baked in (`constants`)."""

    def __init__(self, source: HelionSource, device: str) -> None:
        self.source, self.device = source, device
        self._ready: dict[tuple, PerPrecision] = {}  # shape key -> its checked variants

    def __call__(self, *values: Any) -> Any:
        key = _shape_key(list(values))
        variants = self._ready.get(key)
        if variants is None:  # a new shape: checked and chosen once
            if not self.source.autotune_enabled:  # a tuned config is Helion's to choose (and check)
                self.source.check_tiles(list(values))
            variants = self.source.variants(self.device, self.source.config_index(list(values)))
            if len(self._ready) >= 1024:  # bounded, like the executors' caches
                self._ready.clear()
            self._ready[key] = variants
        return variants(*constants(values))


def constants(values: Any) -> tuple:
    """The arguments with each Python scalar (a tpu_kernels static: float, int, bool) as
    `hl.constexpr`, which Helion bakes into the code it generates, one kernel per value, as
    tpu_kernels compiles a Pallas kernel per static value. Passed as it is, Helion's Pallas
    launcher makes a one-element device tensor of the scalar on every call
    (`torch.tensor([alpha], device=x.device)`), a host-to-device copy per call on a TPU."""
    import helion.language as hl

    return tuple(
        hl.constexpr(v) if isinstance(v, (bool, int, float)) and not isinstance(v, hl.constexpr) else v
        for v in values
    )


def _with_config(kernel: Any, config: Any) -> Any:
    """The same Helion kernel with `config` as its one config."""
    import helion

    return helion.Kernel(
        kernel.fn, configs=[config], settings=kernel.settings, key=_compat.helion_key_fn(kernel)
    )


def _fits(tiles: list[tuple[int, int]]) -> bool:
    """Whether Helion's Pallas backend runs these (size, block) tiles: each size at most its
    block or a multiple of it."""
    return all(size <= block or size % block == 0 for size, block in tiles)


def _host_like(values: list[Any]) -> tuple:
    """The arguments as Helion binds them to read their tiles: a CPU tensor as it is; a tensor
    elsewhere or a JAX array (or tracer) as a CPU tensor of its shape and dtype that holds one
    element (expanded: nothing of its size is allocated); other values as they are."""
    import numpy as np

    out = []
    for v in values:
        if isinstance(v, torch.Tensor) and v.device.type == "cpu":
            out.append(v)
        elif isinstance(v, torch.Tensor) or (hasattr(v, "shape") and hasattr(v, "dtype")):
            dtype = v.dtype if isinstance(v, torch.Tensor) else getattr(torch, np.dtype(v.dtype).name)
            shape = tuple(int(d) for d in v.shape)
            out.append(torch.empty((1,) * len(shape), dtype=dtype).expand(shape))
        else:
            out.append(v)
    return tuple(out)


class _BackendChecked:
    """A device's kernel that checks on its first call that its Helion backend can run in
    this process (the device's backend may be absent here).

    With a `visible` kernel (the op's `visible_kernel=`, on a Pallas-backend device), a call
    that needs no gradient can launch it instead (`launch_visible`, which the eager shortcut
    takes where `visible_only` is set, as for `TpuKernel`): its `n_visible` outputs alone."""

    def __init__(
        self, kernel: TorchKernel, backend: str, visible: TorchKernel | None = None, n_visible: int = 1
    ) -> None:
        self.kernel, self.backend = kernel, backend
        self.checked = False
        self.visible, self.n_visible = visible, n_visible
        self.visible_only = visible is not None
        params = kernel.sig.params
        self._n_positional = sum(not p.keyword_only for p in params)
        self._keywords = tuple(p.name for p in params[self._n_positional :])

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self.checked:
            _require_backend(self.backend, self.kernel.op, self.kernel.device_type)
            self.checked = True
        return self.kernel(*args, **kwargs)

    def launch_visible(self, values: tuple, key: tuple) -> Any:
        """The visible outputs of a call of one value per parameter, in order (the eager
        shortcut's call), from the visible kernel; `key` (its statics, shapes and dtypes) is
        unused: Helion keys its own launches."""
        if self.visible is None:
            raise ValueError(f"{self.kernel.op}: the op has no visible_kernel")
        if not self.checked:
            _require_backend(self.backend, self.kernel.op, self.kernel.device_type)
            self.checked = True
        n = self._n_positional
        out = self.visible(*values[:n], **dict(zip(self._keywords, values[n:])))
        got = len(out) if isinstance(out, (tuple, list)) else 1
        if got != self.n_visible:
            raise OpDefinitionError(
                f"{self.kernel.op}: its visible_kernel returned {got} output(s), but the op has "
                f"{self.n_visible} visible output(s) (its outputs less its residuals)."
            )
        return out[0] if isinstance(out, (tuple, list)) and self.n_visible == 1 else out


def _visible_source(
    name: str, kernel: Any, visible: Any, autotune: bool, float_only: frozenset[str]
) -> HelionSource | None:
    """The source of an op's `visible_kernel=` (None when it has none), after checking that it
    is a Helion kernel with the kernel's parameters."""
    if visible is None:
        return None
    if not is_helion_kernel(visible):
        raise OpDefinitionError(
            f"{name}: visible_kernel= must be a helion.Kernel (the kernel without its residuals), "
            f"got {type(visible).__name__}."
        )
    ours, theirs = _param_names(kernel.fn), _param_names(visible.fn)
    if ours != theirs:
        raise OpDefinitionError(
            f"{name}: visible_kernel= takes parameters {theirs}, but the kernel takes {ours}; "
            "give it the kernel's parameters, in order."
        )
    return HelionSource(name, visible, autotune=autotune, float_only=float_only)


def _param_names(fn: Callable) -> list[str]:
    import inspect

    return list(inspect.signature(fn).parameters)
