"""Helion's Pallas code at the float32 matmul precision torch's setting asks for, and no padded
matmul result: what tpu_kernels changes in the code Helion 1.5.1 generates for a TPU.

1. **Dot precision.** Helion's Pallas backend writes `precision='default'` on every dot it
   generates, whatever the kernel's `dot_precision` setting (`PallasBackend.map_dot_precision`,
   helion/_compiler/pallas/backend.py:284, read by `_emit_pallas_matmul` in
   helion/_compiler/matmul_utils.py:177; its docstring: "all Helion aliases intentionally lower
   to the Pallas default"). A float32 dot at DEFAULT is one bf16 MXU pass on a TPU: on a v5e
   `matmul_helion` in float32 was 0.25 off on values of about 30 at K=512 under torch's
   "highest" (bench/reports/tpu_suite_v5e.json), where the Pallas twin is within 1e-6. An
   explicit `precision=` wins over `jax.default_matmul_precision`, so tracing Helion's code
   under that context (what tpu_kernels does for Pallas kernels, runtime/precision.py) changes
   nothing. Here the backend writes what the setting asks for (`pallas_dot_precision`):
   "highest" and "ieee" (Helion's name for the same on Triton) as HIGHEST; every other value as
   Helion writes it. Mosaic compiles a float32 dot at DEFAULT and HIGHEST only (HIGH is refused,
   runtime/mosaic_precision.py), so torch's "high" runs at HIGHEST, as in the Pallas kernels.

   The precision is in the generated code, and Helion caches per kernel object the code it
   generated and, on a TPU, the torch_tpu `JaxCallable` it launches through (its trace key is
   the generated function's id and the grid: helion/runtime/pallas/launcher.py:1367; the
   callable then traces once per shape and knows nothing of precision). So each precision is
   its own `helion.Kernel` (`PerPrecision`), chosen at each call: a kernel generated for one
   precision is never reused at another, as the TPU path keeps one torch_tpu op per precision
   for Pallas kernels (runtime/devices/tpu.py).

2. **The no-tiling matmul substitution.** Where a matmul kernel's blocks are at least every
   dimension, Helion's launcher runs `jax.jit(lax.dot_general)` in place of the Pallas kernel
   (`_detect_matmul_dot_general_lowering`, helion/_compiler/pallas/backend.py:1238;
   `_build_matmul_dot_general_jit_fn`, helion/runtime/pallas/launcher.py:1529), on the inputs
   it has zero-padded to whole blocks (`_ds_pad_dims`) and returns the padded product (the
   output is not among the padded arguments, so nothing slices it back): a (128, 256) @
   (256, 128) call with blocks of 256 returned a [256, 256] tensor on a TPU, its extra entries
   zero. Its dot also says `precision="default"` (launcher.py:1562). The launcher for JAX
   arrays (`Kernel.jax_fn`, what tpu_kernels runs on the CPU) never substitutes
   (launcher.py:2328), which is why the CPU path gave the right shape. Here the substitution is
   kept only where it computes what the Pallas kernel would (`keep_matmul_dot_general`): every
   dimension equal to every block (nothing padded) at the DEFAULT precision it hard-codes.

Both wrap Helion's `PallasBackend` class (`_compat.wrap_helion_pallas_backend`) for every Helion
kernel generated in the process once `install` has run (the first Helion op tpu_kernels makes):
a Helion kernel of a user's own with `dot_precision="highest"` then gets HIGHEST dots too, and no
padded result. Mosaic's dot lowering is wrapped with them (`mosaic_precision.install`): a dot
with bf16 operands at HIGHEST would otherwise ask Mosaic for a float32 contraction it refuses.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from typing import Any

import jax

from tpu_kernels import _compat
from tpu_kernels.runtime import mosaic_precision, precision

DOT_PRECISIONS = ("default", "highest")
"""The Helion `dot_precision` settings tpu_kernels generates Pallas code at: the two float32 dot
precisions Mosaic compiles."""

_FULL = frozenset({"highest", "ieee"})  # Helion's names for float32 products (ieee: Triton's)
_install_lock = threading.Lock()
_installed: bool | None = None  # None: not tried yet


def helion_dot_precision(jax_name: str | None) -> str:
    """The Helion `dot_precision` for float32 dots asked for at JAX matmul precision `jax_name`
    (None: JAX's default): "default" (one bf16 pass) for a name of precision DEFAULT, else
    "highest" (HIGH too: Mosaic refuses HIGH; a dot algorithm preset too: Mosaic takes none)."""
    if jax_name is None:
        return "default"
    try:
        p = jax.lax.Precision(jax_name)
    except ValueError:
        return "highest"
    return "default" if p == jax.lax.Precision.DEFAULT else "highest"


def pallas_dot_precision(setting: str, shipped: str) -> str:
    """The `precision=` Helion's Pallas backend writes on a dot of a kernel whose `dot_precision`
    is `setting`: "highest" for "highest" and "ieee", else what Helion writes (`shipped`)."""
    return "highest" if setting in _FULL else shipped


def keep_matmul_dot_general(shapes: list[tuple[int, ...]], blocks: list[int], setting: str) -> bool:
    """Whether Helion's `lax.dot_general` substitution for a no-tiling matmul computes what the
    kernel does: no dimension padded (every dimension of its tensors equal to every block) and
    the kernel's dots at the DEFAULT precision the substitution hard-codes."""
    sizes = {d for shape in shapes for d in shape} | set(blocks)
    return len(sizes) == 1 and pallas_dot_precision(setting, "default") == "default"


def install() -> bool:
    """Wrap Helion's Pallas code generation (`pallas_dot_precision`, `keep_matmul_dot_general`)
    and Mosaic's dot lowering, once. False, with a warning, where this Helion keeps them
    elsewhere: its float32 dots then run at one bf16 pass whatever is asked."""
    global _installed
    if _installed is None:
        with _install_lock:
            if _installed is None:
                mosaic_precision.install()
                _installed = _compat.wrap_helion_pallas_backend(pallas_dot_precision, keep_matmul_dot_general)
                if not _installed:
                    warnings.warn(
                        "tpu_kernels: this Helion keeps no PallasBackend.map_dot_precision or "
                        "_detect_matmul_dot_general_lowering in helion._compiler.pallas.backend, so the "
                        "float32 dots of Helion ops run at one bf16 pass whatever torch's matmul "
                        "precision, and a matmul whose blocks exceed its dimensions may return a padded "
                        "result on a TPU.",
                        RuntimeWarning,
                        stacklevel=3,
                    )
    return _installed


class PerPrecision:
    """A Helion kernel on the Pallas backend per dot precision (`DOT_PRECISIONS`), each made on
    first use by `make(dot_precision)` (a `helion.Kernel` with that setting). Calling it runs the
    kernel for torch's precision now (`current`): what the TPU's dispatch kernel calls."""

    def __init__(self, make: Callable[[str], Any]) -> None:
        install()
        self._make = make
        self._kernels: dict[str, Any] = {}
        self._lock = threading.Lock()

    def at(self, dot_precision: str) -> Any:
        """The kernel generated at Helion `dot_precision` ("default" or "highest")."""
        kernel = self._kernels.get(dot_precision)
        if kernel is None:
            if dot_precision not in DOT_PRECISIONS:
                raise ValueError(f"dot_precision must be one of {DOT_PRECISIONS}, got {dot_precision!r}")
            with self._lock:
                kernel = self._kernels.get(dot_precision)
                if kernel is None:
                    kernel = self._kernels[dot_precision] = self._make(dot_precision)
        return kernel

    def current(self) -> Any:
        """The kernel for a call now: torch's float32 matmul precision (`precision.current`)."""
        return self.at(helion_dot_precision(precision.current()))

    def traced(self) -> Any:
        """The kernel for a JAX trace: the default matmul precision it is traced at (what
        `precision.traced` sets around the CPU path's and the TPU lowering check's traces)."""
        return self.at(helion_dot_precision(jax.config.jax_default_matmul_precision))

    def __call__(self, *args: Any) -> Any:
        return self.current()(*args)


__all__ = [
    "DOT_PRECISIONS",
    "PerPrecision",
    "helion_dot_precision",
    "install",
    "keep_matmul_dot_general",
    "pallas_dot_precision",
]
