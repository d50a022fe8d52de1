"""TPU: the kernel runs through torch_tpu's public Pallas API, on device, no host copy.

`torch.tpu.pallas.jax_op` registers a JAX function as an op whose TPU kernel
exports the function for the TPU (`jax.export`, platforms=["tpu"]), compiles
it once per shape and launches it on the tensors' device memory. tpu_kernels
registers one such inner op per kernel the first time it runs on a TPU
(`<ns>::<name>__torch_tpu`) and calls it from the outer op's TPU kernel, so
the outer op keeps tpu_kernels' schema, fake function and autograd.

DTensors: with a sharding rule, DTensor runs the op on each rank's local shard,
which reaches the per-shard inner op above. `jax_op` can also take the global
view (`mesh=`, `input_partition_specs=`, `output_partition_specs=`; local
tensors in, JAX partitions the global program); `TpuKernel.mesh_op` builds such
an op and `partition_spec` translates DTensor placements into its specs.

Peaks for the benchmark's roofline (`peaks`) come from JAX's own table
(`jax.experimental.pallas.tpu.get_tpu_info_for_chip`, per TensorCore); a figure is
compared with the peak of the cores one torch device drives (both cores of a v4/v5p
chip in megacore mode, one core otherwise). Some of them:

| device kind | bf16 TFLOP/s | HBM GB/s | source |
|---|---|---|---|
| `TPU v4` (megacore) | 275 | 1230 | 2 x get_tpu_info_for_chip(TPU_V4, 2) per core |
| `TPU v5 lite` (v5e) | 197 | 820 | get_tpu_info_for_chip(TPU_V5E, 1) |
| `TPU v5p` (megacore) | 459 | 2460 | 2 x get_tpu_info_for_chip(TPU_V5P, 2) per core |
| `TPU v6 lite` (v6e) | 920 | 1640 | get_tpu_info_for_chip(TPU_V6E, 1) |
| `TPU7x` (one TensorCore per torch device) | 1155 | 3700 | get_tpu_info_for_chip(TPU_7X, 1) |
"""

from __future__ import annotations

import inspect
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch

from tpu_kernels import _compat, startup
from tpu_kernels.definition.signature import Signature, static_key
from tpu_kernels.errors import BackendUnavailableError, InvalidArgumentError, wrapping
from tpu_kernels.runtime import devices, precision
from tpu_kernels.runtime.devices.tpu_launch import DirectLaunch, tensor_slots
from tpu_kernels.runtime.devices.tpu_memory import MemoryCheck

# torch_tpu renames PrivateUse1 to "tpu" when it is imported; registering on the
# dispatch key rather than the device name works whether or not it is loaded.
DISPATCH_KEY = "PrivateUse1"


def torch_tpu_pallas() -> Any:
    """`torch.tpu.pallas` (torch_tpu's public API), or BackendUnavailableError saying how to get it."""
    try:
        with warnings.catch_warnings():
            if not startup.has_tpu_device():
                # its advice to preload tcmalloc is for TPU hosts (tpu_kernels.startup)
                warnings.filterwarnings("ignore", message="<TorchTpu/Performance/TcMalloc/")
            import torch_tpu  # noqa: F401  (importing it installs torch.tpu)
    except ImportError as e:
        raise BackendUnavailableError(
            f"TPU tensors need torch_tpu ({e}). Install it with: pip install torch-tpu"
        ) from e
    pallas = getattr(getattr(torch, "tpu", None), "pallas", None)
    if pallas is None or not hasattr(pallas, "jax_op"):
        raise BackendUnavailableError(
            f"torch_tpu {getattr(torch_tpu, '__version__', '?')} has no torch.tpu.pallas.jax_op; "
            "tpu_kernels needs torch-tpu>=0.2.0 (pip install -U torch-tpu)."
        )
    return pallas


def partition_spec(placements: Sequence[Any], mesh_dim_names: Sequence[str] | None, ndim: int) -> Any:
    """DTensor placements (one per mesh dim) -> the `jax.sharding.PartitionSpec` of a tensor with `ndim` dims.

    `Shard(d)` on mesh dim i names `mesh_dim_names[i]` at entry d; several mesh
    dims sharding one tensor dim give a tuple in mesh-dim order (the first is
    the major one, as DTensor splits them); `Replicate()` names nothing. A
    `Partial()` (a pending sum) has no PartitionSpec, and neither has an
    uneven or strided shard order: both raise."""
    from jax.sharding import PartitionSpec
    from torch.distributed.tensor import Partial, Replicate, Shard

    if mesh_dim_names is None:
        raise ValueError(
            "partition_spec: the DeviceMesh has no mesh_dim_names; create it with "
            "init_device_mesh(..., mesh_dim_names=(...)) naming the JAX mesh's axes."
        )
    if len(placements) != len(mesh_dim_names):
        raise ValueError(
            f"partition_spec: {len(placements)} placements for a mesh of {len(mesh_dim_names)} dims "
            f"{tuple(mesh_dim_names)}."
        )
    entries: list[list[str]] = [[] for _ in range(ndim)]
    for name, p in zip(mesh_dim_names, placements):
        if type(p) is Shard:
            d = p.dim + ndim if p.dim < 0 else p.dim
            if not 0 <= d < ndim:
                raise ValueError(
                    f"partition_spec: Shard({p.dim}) is out of range for a tensor with {ndim} dims."
                )
            entries[d].append(name)
        elif isinstance(p, Partial):
            raise ValueError(
                f"partition_spec: {p} on mesh dim '{name}' is a pending sum, which a PartitionSpec "
                "cannot express; redistribute to Replicate() or Shard(d) first."
            )
        elif not isinstance(p, Replicate):
            raise ValueError(f"partition_spec: placement {p!r} on mesh dim '{name}' has no PartitionSpec.")
    return PartitionSpec(*(None if not e else e[0] if len(e) == 1 else tuple(e) for e in entries))


def inner_function(sig: Signature, fn: Callable, n_results: int | None) -> Callable:
    """`fn` with the signature torch_tpu's `jax_op` reads: jax.Array tensors, typed
    statics, and a return annotation that counts every result (outputs, then the
    new values of mutated arguments).

    torch_tpu calls it with positional arguments (its `JaxCallable` binds the
    torch schema's values in order, in its fake and on the device alike), while a
    kernel body is called by name everywhere else (the CPU and CUDA paths:
    `jax_exec`), and some bodies take names only (a derived backward's `**kwargs`).
    So the call binds what arrives to the op's parameter names and calls `fn` by
    name: whatever way torch_tpu passes them, the body sees the CPU path's call."""
    import jax

    names = [p.name for p in sig.params]

    def call(*args: Any, **kwargs: Any) -> Any:
        if len(args) > len(names):
            raise TypeError(f"{sig.op}: {len(args)} positional arguments for {len(names)} parameters")
        for name, value in zip(names, args):
            if name in kwargs:
                raise TypeError(f"{sig.op}: argument '{name}' given twice")
            kwargs[name] = value
        return fn(**kwargs)

    params = []
    for p in sig.params:
        ann = _annotation(p.schema_type, jax.Array)
        kind = inspect.Parameter.KEYWORD_ONLY if p.keyword_only else inspect.Parameter.POSITIONAL_OR_KEYWORD
        params.append(inspect.Parameter(p.name, kind, default=p.default, annotation=ann))
    if n_results is None:
        returns: Any = list[jax.Array]
    elif n_results == 1:
        returns = jax.Array
    else:
        returns = tuple[(jax.Array,) * n_results]
    call.__signature__ = inspect.Signature(params, return_annotation=returns)  # type: ignore[attr-defined]
    call.__name__ = getattr(fn, "__name__", "kernel")
    return call


def jax_callable(op: Any) -> Any:
    """The torch_tpu `JaxCallable` a `jax_op` op wraps (the function its custom op runs on the
    device: `_compat.custom_op_function`), or the op itself where a torch or
    torch_tpu version keeps it elsewhere: calling the op is the same launch, one dispatch
    slower."""
    fn = _compat.custom_op_function(op)
    return fn if callable(fn) and hasattr(fn, "exported") else op


_PLAIN = (torch.Tensor, torch.nn.Parameter)
_DISPATCHED = "dispatched"  # heads the launch keys of calls through the dispatcher (TpuKernel.__call__)


def _narrowed(values: tuple) -> tuple:
    """`values` with each int64 tensor as int32: torch_tpu's `jax_op` fails on an int64 input
    ("a required argument is in a failed state", torch_tpu 0.2.0), and JAX on a TPU computes
    integers in 32 bits anyway (its 64-bit mode is off), so the kernel sees what it would have
    seen. Class labels and indices fit; a value past int32 would wrap (docs/dtypes.md). The
    caller's tensors are not touched: the narrowing is a new tensor, so an op that updates an
    argument in place is not narrowed (its update would land in the copy)."""
    if not any(type(v) in _PLAIN and v.dtype == torch.int64 for v in values):
        return values
    return tuple(v.to(torch.int32) if type(v) in _PLAIN and v.dtype == torch.int64 else v for v in values)


def _key_part(value: Any) -> Any:
    """A value's part of a launch key: a tensor's shape and dtype, a static's `static_key`."""
    if isinstance(value, torch.Tensor):
        return (value.shape, value.dtype)
    return static_key(value)


def _annotation(schema_type: str, array: Any) -> Any:
    optional = schema_type.endswith("?")
    base = schema_type.removesuffix("?")
    table: dict[str, Any] = {
        "Tensor": array,
        "Tensor[]": list[array],
        "int": int,
        "float": float,
        "bool": bool,
        "str": str,
        "ScalarType": torch.dtype,
        "int[]": list[int],
        "float[]": list[float],
        "bool[]": list[bool],
    }
    ann = table[base]
    return ann | None if optional else ann


class TpuKernel:
    """The outer op's TPU kernel: builds the torch_tpu inner op on first use."""

    def __init__(
        self,
        qualname: str,
        sig: Signature,
        fn: Callable,
        *,
        n_outputs: int,
        mutated: tuple[int, ...],
        returns_list: bool = False,
        n_visible: int | None = None,
        visible_fn: Callable | None = None,
    ):
        self.qualname = qualname
        self.sig = sig
        self.fn = fn
        self.visible_fn = visible_fn  # the op's visible_kernel= (None: derived from fn)
        self.n_outputs = n_outputs
        self.mutated = mutated
        self.returns_list = returns_list
        self.n_visible = n_outputs if n_visible is None else n_visible
        # a call that needs no residual can launch a kernel returning the visible outputs alone
        # (`launch_visible`): each output of a launch costs torch_tpu about a whole call more
        self.visible_only = self.n_visible < n_outputs and not mutated and not returns_list
        self._inner: dict[str, Any] = {}  # JAX matmul precision -> torch_tpu op
        self._callable: dict[str, Any] = {}  # ... -> the op's JaxCallable (or the op)
        self._direct: dict[str, DirectLaunch | None] = {}  # ... -> its launches by call key
        # the same three for the kernel that returns the visible outputs alone
        self._visible_inner: dict[str, Any] = {}
        self._visible_callable: dict[str, Any] = {}
        self._visible_direct: dict[str, DirectLaunch | None] = {}
        self._slots = tensor_slots(sig.params)
        self.memory = MemoryCheck(qualname, sig, fn)  # a new key's call that cannot fit the chip
        self._n_positional = sum(not p.keyword_only for p in sig.params)
        self._keywords = tuple(p.name for p in sig.params[self._n_positional :])
        self._keyword_set = frozenset(self._keywords)
        self._keyword_defaults = tuple((p.name, p.default) for p in sig.params[self._n_positional :])
        self._mesh_ops: dict[Any, Any] = {}
        self._lock = threading.Lock()

    def inner_op(self, matmul_precision: str | None = None) -> Any:
        """The torch_tpu op (a CustomOpDef) for a JAX matmul precision (default: the
        current one); built once per precision, thread-safely. torch_tpu's `jax_op`
        traces once per shape and knows nothing of precision, so each precision is
        its own inner op, its function traced at that precision."""
        p = matmul_precision or precision.current()
        with self._lock:
            op = self._inner.get(p)
            if op is None:
                op = torch_tpu_pallas().jax_op(f"{self.qualname}__torch_tpu_{p}", self._body(p))
                self._callable[p] = jax_callable(op)
                self._direct[p] = DirectLaunch.for_callable(self._callable[p], self._slots)
                self._inner[p] = op
            return op

    def visible_op(self, matmul_precision: str | None = None) -> Any:
        """The torch_tpu op of the kernel returning the op's visible outputs alone (its residuals
        left inside the program), for a call that needs no gradient (`launch_visible`); built
        once per precision, as `inner_op`."""
        if not self.visible_only:
            raise ValueError(f"{self.qualname}: every output is visible; use inner_op")
        p = matmul_precision or precision.current()
        with self._lock:
            op = self._visible_inner.get(p)
            if op is None:
                n = self.n_visible
                if self.visible_fn is not None:  # the op's own kernel without the residuals
                    own, name = precision.at_precision(self.visible_fn, p), self.qualname

                    def visible(**kwargs: Any) -> Any:
                        out = own(**kwargs)
                        outs = out if isinstance(out, (tuple, list)) else (out,)
                        if len(outs) != n:
                            raise ValueError(
                                f"{name}: its visible_kernel returned {len(outs)} output(s), but the op "
                                f"returns {n} without its residuals."
                            )
                        return outs[0] if n == 1 else tuple(outs)

                else:
                    full = precision.at_precision(self.fn, p)

                    def visible(**kwargs: Any) -> Any:
                        out = full(**kwargs)
                        return out[0] if n == 1 else tuple(out[:n])

                visible.__name__ = f"{getattr(self.fn, '__name__', 'kernel')}_visible"
                body = inner_function(self.sig, visible, n)
                op = torch_tpu_pallas().jax_op(f"{self.qualname}__torch_tpu_{p}_visible", body)
                fn = jax_callable(op)
                # its launches before the callable: `launch_visible` reads them without the
                # lock, and a callable found means its launches are there
                self._visible_direct[p] = DirectLaunch.for_callable(fn, self._slots)
                self._visible_callable[p] = fn
                self._visible_inner[p] = op
            return op

    def mesh_op(self, mesh: Any, input_specs: tuple, output_specs: tuple) -> Any:
        """The torch_tpu op for the global view over a JAX `mesh` (see `partition_spec`):
        called with local shards, JAX runs the kernel as one program partitioned by
        the specs. One per (mesh, specs, matmul precision), built once."""
        p = precision.current()
        key = (mesh, tuple(input_specs), tuple(output_specs), p)
        with self._lock:
            op = self._mesh_ops.get(key)
            if op is None:
                name = f"{self.qualname}__torch_tpu_mesh{len(self._mesh_ops)}"
                op = torch_tpu_pallas().jax_op(
                    name,
                    self._body(p),
                    mesh=mesh,
                    input_partition_specs=tuple(input_specs),
                    output_partition_specs=tuple(output_specs),
                )
                self._mesh_ops[key] = op
            return op

    def _body(self, p: str) -> Callable:
        """What torch_tpu's op runs: the kernel at JAX matmul precision `p`, with the
        signature `jax_op` reads (`inner_function`: outputs, then mutated arguments)."""
        n_results = None if self.returns_list else self.n_outputs + len(self.mutated)
        return inner_function(self.sig, precision.at_precision(self.fn, p), n_results)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        plain = True
        for t in (*args, *kwargs.values()):
            if type(t) in _PLAIN:
                if t.device.type != "tpu":  # torch_tpu's launch refuses it without naming the op
                    self._refuse_device(args, kwargs)
            elif isinstance(t, (torch.Tensor, list, tuple)):
                plain = False  # a tensor subclass, or a list: torch_tpu's op takes it
        if (
            plain
            and not self.mutated
            and len(args) == self._n_positional
            and kwargs.keys() <= self._keyword_set
        ):
            # the dispatcher's call (autograd's redispatch, torch.compile's eager fallback): the
            # positional parameters in order, keyword-only ones by name where given (the kernel
            # takes the defaults of the others), so it has a launch key too
            values = args + tuple(kwargs.get(n, d) for n, d in self._keyword_defaults)
            return self.launch(values, (_DISPATCHED, *map(_key_part, values)))  # launch narrows
        if not self.mutated:  # a mutated argument must stay the caller's tensor: its update lands there
            args, kwargs = _narrowed(args), dict(zip(kwargs, _narrowed(tuple(kwargs.values()))))
        return self._run(args, kwargs, plain)

    def launch(self, values: tuple, key: tuple) -> Any:
        """A call of one value per parameter, in order, every tensor a plain tensor on the TPU,
        no argument mutated, with its key (its statics, each tensor's shape and dtype): the
        eager shortcut's (dispatch/eager_device.py, which has checked), and the dispatcher's
        (`__call__`).

        A key seen before launches torch_tpu's kernel directly (`tpu_launch.DirectLaunch`);
        a new one goes through `JaxCallable`, which is then remembered under the key, once
        `tpu_memory.MemoryCheck` has found that it can fit the chip's memory."""
        values = _narrowed(values)
        p = precision.current()
        direct = self._direct.get(p)
        launch = direct.known(key) if direct is not None else None
        n = self._n_positional
        if launch is None:
            self.memory.check(values, key)
            args, kwargs = values[:n], dict(zip(self._keywords, values[n:]))
            result = self._run(args, kwargs, True)
            direct = self._direct.get(p)  # built by the first call at this precision
            if direct is not None:
                direct.remember(key, args, kwargs)
            return result
        try:
            results = direct.run(launch, values)  # type: ignore[union-attr]
        except Exception as e:
            raise self._failed(e, values[:n], dict(zip(self._keywords, values[n:]))) from e
        return self.sig.pack(results if isinstance(results, (tuple, list)) else (results,), self.returns_list)

    def launch_visible(self, values: tuple, key: tuple) -> Any:
        """As `launch`, for a call whose result needs no residual (the eager shortcut's: no
        gradient is needed): the visible outputs alone, as the op's call returns them, from
        the kernel that returns only those (`visible_op`). The kernel computes the residuals
        all the same; torch_tpu is spared their output buffers."""
        values = _narrowed(values)
        p = precision.current()
        fn = self._visible_callable.get(p)
        if fn is None:
            self.visible_op(p)
            fn = self._visible_callable[p]
        direct = self._visible_direct.get(p)
        launch = direct.known(key) if direct is not None else None
        n = self._n_positional
        if launch is not None:
            try:
                results = direct.run(launch, values)  # type: ignore[union-attr]
            except Exception as e:
                raise self._failed(e, values[:n], dict(zip(self._keywords, values[n:]))) from e
        else:
            self.memory.check(values, key)
            args, kwargs = values[:n], dict(zip(self._keywords, values[n:]))
            try:
                results = fn(*args, **kwargs)
            except Exception as e:
                raise self._failed(e, args, kwargs) from e
            if direct is not None:
                direct.remember(key, args, kwargs)
        return results if self.n_visible == 1 else tuple(results)

    def _run(self, args: tuple, kwargs: dict, plain: bool) -> Any:
        """Launches the kernel at the current matmul precision. `plain`: every tensor argument
        is a plain torch.Tensor (or Parameter), so torch_tpu's `JaxCallable` is called
        directly; its op (a custom op around the same callable) would dispatch a second time
        and check its outputs for aliasing, which a JAX result never does. Otherwise (tensor
        subclasses, such as torch_tpu's own wrapper tensors) the call goes through its op."""
        p = precision.current()
        target = (self._callable if plain else self._inner).get(p)
        if target is None:
            self.inner_op(p)
            target = (self._callable if plain else self._inner)[p]
        try:
            results = target(*args, **kwargs)
        except Exception as e:
            raise self._failed(e, args, kwargs) from e
        if not isinstance(results, (tuple, list)):
            results = (results,)
        if self.mutated:
            values = self.sig.values(args, kwargs)
            for j, i in enumerate(self.mutated):
                values[i].copy_(results[self.n_outputs + j])
        return self.sig.pack(results, self.returns_list)

    def _failed(self, e: Exception, args: tuple, kwargs: dict) -> Exception:
        """What torch_tpu's trace of the kernel (its input checks) or its launch raised (a
        compile error, memory exhausted), said with the op's name and the call's tensors, of
        the kind the CPU path raises for the same cause (errors.wrapping)."""
        return wrapping(e)(
            f"{self.qualname}: the TPU kernel failed for {self._describe(args, kwargs)}: "
            f"{type(e).__name__}: {e}"
        )

    def _tensors(self, args: tuple, kwargs: dict) -> list[tuple[str, torch.Tensor]]:
        values = self.sig.values(args, kwargs)
        out = []
        for param, v in zip(self.sig.params, values):
            for t in v if isinstance(v, (list, tuple)) else (v,):
                if isinstance(t, torch.Tensor):
                    out.append((param.name, t))
        return out

    def _describe(self, args: tuple, kwargs: dict) -> str:
        try:
            tensors = self._tensors(args, kwargs)
        except Exception:  # the call itself did not bind: torch_tpu's error says why
            return "this call"
        return ", ".join(f"{n} {str(t.dtype).removeprefix('torch.')}{list(t.shape)}" for n, t in tensors)

    def _refuse_device(self, args: tuple, kwargs: dict) -> None:
        tensors = self._tensors(args, kwargs)
        others = [(n, t) for n, t in tensors if t.device.type != "tpu"]
        if not others:
            return
        on_tpu = [n for n, t in tensors if t.device.type == "tpu"]
        name, t = others[0]
        raise InvalidArgumentError(
            f"{self.qualname}: argument '{name}' is on {t.device}, while "
            f"{', '.join(repr(n) for n in on_tpu) or 'the others'} {'is' if len(on_tpu) == 1 else 'are'} on tpu; "
            f"a call's tensors must share one device: move it first ({name}.to('tpu'))."
        )


def peaks(device_kind: str) -> devices.Peaks | None:
    """The peaks of one torch TPU device of this kind ("TPU v6 lite"), from JAX's
    per-TensorCore table; None for a kind JAX does not know."""
    try:
        from jax.experimental.pallas import tpu as tpu_info

        version_of = _compat.get("chip_version_from_device_kind")
    except (ImportError, _compat.CompatError):  # pragma: no cover - depends on JAX's internals
        return None
    try:
        version = version_of(device_kind)
    except Exception:
        return None
    if version is None:
        return None
    megacore = version in (tpu_info.ChipVersion.TPU_V4, tpu_info.ChipVersion.TPU_V5P)
    cores = 2 if megacore else 1
    info = tpu_info.get_tpu_info_for_chip(version, cores)
    return devices.Peaks(
        info.bf16_ops_per_second * cores,
        info.mem_bw_bytes_per_second * cores,
        f"jax get_tpu_info_for_chip({version.name}, {cores}) x {cores} TensorCore(s)",
    )


def _available() -> bool:
    acc = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
    return acc is not None and acc.type == "tpu"


def _describe() -> tuple[str, torch.device]:
    if not _available():
        raise RuntimeError("--device tpu, but torch_tpu reports no TPU device.")
    return torch.tpu.get_device_name(), torch.device("tpu")  # type: ignore[attr-defined]


SPEC = devices.register(
    devices.DeviceSpec(
        name="tpu",
        dispatch_key=DISPATCH_KEY,
        jax_kernel=lambda spec, body: TpuKernel(
            spec.name,
            spec.signature,
            body,
            n_outputs=spec.signature.n_outputs,
            mutated=spec.mutated,
            returns_list=spec.returns_list,
            n_visible=spec.n_visible,
            visible_fn=getattr(spec.source, "visible_body", None),
        ),
        available=_available,
        synchronize=lambda: torch.accelerator.synchronize(),
        aliases=("privateuseone",),  # its device type before torch_tpu renames PrivateUse1
        jax_baseline=False,  # a jitted JAX function cannot take torch_tpu's tensors
        device_time=True,  # bench/profile.py reads device time from torch_tpu's profile
        describe=_describe,
        peaks=peaks,
    )
)
