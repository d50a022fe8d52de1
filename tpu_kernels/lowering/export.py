"""Lowering a kernel for the TPU on a machine without one.

`jax.export` with platforms=["tpu"] runs the Pallas -> Mosaic lowering on the
CPU: block shapes, dtypes and most unsupported operations are rejected here.
Errors that only the TPU compiler itself raises (Mosaic's layout passes, the
scoped VMEM limit) are not caught this way.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import jax

from tpu_kernels import cpu_client
from tpu_kernels.definition import dtypes
from tpu_kernels.errors import KernelError
from tpu_kernels.lowering.target import Chip, targeting

if TYPE_CHECKING:
    from tpu_kernels.definition.protocol import Op


def flat_kernel(kop: Op, args: tuple, kwargs: dict) -> tuple[Callable, list[Any], bool]:
    """(a function of the tensor arguments only, their ShapeDtypeStructs, whether x64 is needed)."""
    sig = kop.signature
    values = sig.bind(args, kwargs)
    tensors, statics = sig.split(values)
    specs = [dtypes.spec(kop.name, p.name, v) for p, v in zip(sig.tensor_params, tensors)]
    static_kwargs = sig.static_kwargs(statics)
    names = [p.name for p in sig.tensor_params]

    def flat(*ts: Any) -> Any:
        return kop.source.lowering_body(**static_kwargs, **dict(zip(names, ts)))

    return flat, specs, dtypes.needs_x64(specs, static_kwargs)


def cross_compiling() -> contextlib.AbstractContextManager:
    """Tell kernel libraries that we lower for a machine other than this one.

    Tokamax refuses its TPU kernels ("Not supported on cpu") unless its
    `cross_compile` option is set; with it, Tokamax ops lower their Mosaic
    kernels for the chip of the abstract mesh (`lowering.target.targeting`).
    """
    if "tokamax" not in sys.modules:  # no op of this process uses Tokamax
        return contextlib.nullcontext()
    try:
        import tokamax

        return tokamax.config.cross_compile(True)
    except (ImportError, AttributeError):  # pragma: no cover - depends on Tokamax releases
        return contextlib.nullcontext()


@contextlib.contextmanager
def lowering_for_tpu(chip: Chip | None = None) -> Iterator[None]:
    """Trace for `chip` (None: the attached TPU, or the default chip), with kernel libraries
    told that they cross-compile: what every TPU lowering of the check runs under."""
    with targeting(chip), cross_compiling():
        yield


def x64_scope(x64: bool) -> contextlib.AbstractContextManager:
    return jax.enable_x64(True) if x64 else contextlib.nullcontext()


def export_kernel(
    kop: Op, args: tuple, kwargs: dict, *, platform: str = "tpu", chip: Chip | None = None
) -> jax.export.Exported:
    """Export `kop`'s kernel for `platform` at the shapes of the example arguments.

    For "tpu", `chip` is the generation to lower for (default: the attached TPU, or
    lowering.target.DEFAULT_CHIP on a machine without one)."""
    flat, specs, x64 = flat_kernel(kop, args, kwargs)
    target = lowering_for_tpu(chip) if platform == "tpu" else contextlib.nullcontext()
    cpu_client.synchronous()  # jax.export makes JAX's clients, the CPU one too
    try:
        with x64_scope(x64), target:
            return jax.export.export(jax.jit(flat), platforms=[platform])(*specs)
    except Exception as e:
        raise KernelError(f"{kop.name}: lowering for {platform} failed: {type(e).__name__}: {e}") from e


def mosaic_modules(mlir_text: str) -> list[str]:
    """The Mosaic modules inside a TPU lowering's text (`Exported.mlir_module()`), as MLIR text:
    each Pallas kernel is serialized (bytecode, base64) into its `tpu_custom_call`'s config, so
    the outer module's text shows none of what Mosaic is asked to compile (a dot's
    `contract_precision`, say). Read with an MLIR context that accepts Mosaic's dialects
    unregistered (JAX 0.10's needs Mosaic's TPU dialect registered too)."""
    import base64
    import json
    import re

    from jax.interpreters import mlir

    from tpu_kernels import _compat

    dialect = _compat.get("mosaic_tpu_dialect")
    out = []
    for config in re.findall(r'backend_config = "(\{\\22custom_call_config.*?)"', mlir_text):
        # MLIR's string escapes: a byte as a backslash and two hex digits (\22 for a quote)
        text = re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)), config)
        body = json.loads(text)["custom_call_config"]["body"]
        with mlir.make_ir_context() as ctx:
            ctx.allow_unregistered_dialects = True
            if dialect is not None:
                dialect.register_dialect(ctx)
            out.append(str(mlir.ir.Module.parse(base64.b64decode(body))))
    return out
