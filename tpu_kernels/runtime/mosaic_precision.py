"""Trace at a JAX matmul precision that Pallas TPU kernels can compile as well.

`traced_at(name)` is `jax.default_matmul_precision(name)` for the plain-XLA part of
a trace, while the float32 dots of every Pallas kernel body traced inside it run at
a precision Mosaic (the TPU kernel compiler) accepts:

| JAX name | XLA dots | dots in a Pallas kernel body |
|---|---|---|
| "highest", "float32" | HIGHEST (~1e-7 normwise vs float64) | HIGHEST |
| "high", "tensorfloat32" | HIGH (bf16_3x on TPU: 1.3e-5) | HIGHEST (~1e-7, about a sixth of the one-pass speed); through `dot`, three bf16 passes (4.4e-6, about a third) |
| "default", "bfloat16", "fastest" | DEFAULT (one bf16 pass: 2.3e-3 at K=2048) | DEFAULT |

(normwise errors of float32 products against float64, measured on a TPU v5e with JAX
0.10.2; the speed relative to one bf16 pass.)
"high" inside a kernel is raised to HIGHEST because JAX 0.10.2's Mosaic lowering
refuses HIGH ("Unsupported dot precision: HIGH"): with
`torch.set_float32_matmul_precision("high")`, which many training scripts set, every
Pallas kernel with a float32 dot failed to compile. HIGHEST is the precision that is
at least as accurate as asked and that the TPU compiles (newer JAX, 0.12, lowers
HIGH as Mosaic's bf16x3, not yet measured on a chip, so not used here). A dot
algorithm preset name ("BF16_BF16_F32_X3", ...) is left as it is: Mosaic accepts none.

A kernel body that computes its float32 products with `dot(x, y)` (the shipped matmul does)
gets what "high" asks for instead of HIGHEST: three bf16 passes, the split product XLA's dot
computes at HIGH, in half HIGHEST's passes (the v5e's times and errors:
bench/reports/chip_v5e_matmul_probe.json). `requested()` says which name the body was asked for; it is a
JAX user context, so a body traced for "high" is never reused where "highest" was asked.

A dot with no float32 operand (bf16, integers, fp8) is lowered without a contract precision
whatever it was traced at (`mosaic_dot_precision`, wrapped around Mosaic's dot lowering rule):
its product is exact in one MXU pass, and Mosaic refuses a float32 contraction of bf16
operands ("Bad lhs type"), so a bf16 matmul under torch's "high" or "highest" failed to compile
on a TPU.

Only dots without an explicit precision follow the setting: a kernel author's
`jnp.dot(..., precision=lax.Precision.HIGH)` inside a kernel is left as written (an
explicit request; JAX 0.10.2's Mosaic refuses it with the error above), and so is a
`jax.default_matmul_precision(...)` the kernel enters itself.

How: Pallas enters a context manager around each kernel body (and index map) it traces
(`tracing_grid_env` for pallas_call, `mpmd_map_tracing_context` for `pl.kernel`);
tpu_kernels wraps them (`_compat.wrap_pallas_kernel_tracing`) with a context that, inside
`traced_at` only, swaps a high-class default precision for "highest" while the body is
traced (`lax.dot_general` reads the default when it binds). Outside `traced_at` Pallas
traces as JAX ships it. Whether `traced_at` is active is a `jax.make_user_context`
value, so JAX's jit caches never reuse a trace made inside it for one outside, or the
reverse. Where one of those JAX functions has moved, `traced_at` traces everything at the
kernel precision instead (XLA dots too: more accurate than asked, never refused) and
says so once with a warning.

Imports only JAX and the standard library: the TPU machine has no torch.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import warnings
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp

from tpu_kernels import _compat

_HIGH_IN_KERNELS = "highest"
"""What a name of precision HIGH becomes inside a Pallas kernel body."""

_ACTIVE = jax.make_user_context(False)  # True inside traced_at (part of JAX's jit cache keys)
_REQUESTED = jax.make_user_context(None)
"""Inside a kernel body traced under traced_at: the precision name it was asked for (`requested`).
A user context, so part of JAX's trace cache keys: Pallas caches a kernel body's trace by the
context it is traced in, where "high" and "highest" both read "highest" as the default."""
_install_lock = threading.Lock()
_hooked: bool | None = None  # None: not tried yet; False: this JAX has no hook (fallback)


def kernel_precision(name: str) -> str:
    """The JAX matmul precision name the Pallas kernel bodies traced under `traced_at(name)`
    run at: "highest" for a name of precision HIGH ("high", "tensorfloat32",
    "bfloat16_3x"), else `name` itself."""
    try:
        p = jax.lax.Precision(name)
    except ValueError:  # a dot algorithm preset, or a name JAX refuses when it is entered
        return name
    return _HIGH_IN_KERNELS if p == jax.lax.Precision.HIGH else name


@contextlib.contextmanager
def traced_at(name: str) -> Iterator[None]:
    """Trace plain-XLA dots at JAX matmul precision `name` ("default", "high", "highest", or
    any name `jax.default_matmul_precision` takes), and Pallas kernel bodies at
    `kernel_precision(name)` ("highest" for "high"), which Mosaic compiles."""
    if not _hook():
        with jax.default_matmul_precision(kernel_precision(name)), _ACTIVE(True):
            yield
        return
    with jax.default_matmul_precision(name), _ACTIVE(True):
        yield


def requested() -> str | None:
    """The JAX matmul precision name a float32 dot traced here was asked for: inside a Pallas
    kernel body traced under `traced_at`, the name before it was raised for Mosaic ("high", not
    the "highest" the body's default now reads); elsewhere the default precision in effect
    (None: JAX's default)."""
    asked = _REQUESTED.value
    return asked if asked is not None else jax.config.jax_default_matmul_precision


def _is_high(name: str | None) -> bool:
    if name is None:
        return False
    try:
        return jax.lax.Precision(name) == jax.lax.Precision.HIGH
    except ValueError:  # a dot algorithm preset
        return False


def dot(x: jax.Array, y: jax.Array, *, preferred_element_type=None, contract: tuple[int, int] = (1, 0)) -> jax.Array:
    """`jnp.dot(x, y, preferred_element_type=...)` for a Pallas TPU kernel body (2-D x and y,
    contracting x's dim `contract[0]` with y's dim `contract[1]`: (1, 0) is x @ y, (1, 1)
    x @ y.T and (0, 0) x.T @ y, which Mosaic computes without materialising the transpose), where a float32
    product asked for at a precision of class HIGH (`requested`: torch's "high") runs as three
    bf16 MXU passes, the product XLA's dot computes at HIGH: x = x_hi + x_lo with both halves
    bf16 (y likewise), and x_lo y_hi + x_hi y_lo + x_hi y_hi accumulated in float32. Mosaic
    refuses HIGH itself, and HIGHEST (what such a dot is raised to otherwise) costs six passes;
    the three passes' time and error against HIGHEST's and XLA's dot at HIGH are in
    bench/reports/chip_v5e_matmul_probe.json. Any other dtype or precision: `jnp.dot`."""
    if contract == (1, 0):
        one = jnp.dot
    else:
        dims = (((contract[0],), (contract[1],)), ((), ()))

        def one(a, b, **kw):
            return jax.lax.dot_general(a, b, dims, **kw)

    if not (x.dtype == y.dtype == jnp.float32 and _is_high(requested())):
        return one(x, y, preferred_element_type=preferred_element_type)
    out = jnp.float32 if preferred_element_type is None else preferred_element_type

    def halves(a):
        hi = a.astype(jnp.bfloat16)
        return hi, (a - hi.astype(jnp.float32)).astype(jnp.bfloat16)

    (xh, xl), (yh, yl) = halves(x), halves(y)
    # bf16 operands: each pass is one MXU pass whatever the precision; said explicitly, since
    # inside the body the default reads "highest"
    f = functools.partial(one, preferred_element_type=jnp.float32, precision=jax.lax.Precision.DEFAULT)
    return (f(xl, yh) + f(xh, yl) + f(xh, yh)).astype(out)


@contextlib.contextmanager
def _body(asked: str, wanted: str) -> Iterator[None]:
    with _REQUESTED(asked):
        if wanted == asked:
            yield
        else:
            with jax.default_matmul_precision(wanted):
                yield


def _in_kernel() -> contextlib.AbstractContextManager:
    """Entered by Pallas around each kernel body it traces: inside traced_at, the ambient
    default precision (the kernel's caller may have changed it) as the kernel needs it, and
    the name it was asked at kept for `dot`."""
    if not _ACTIVE.value:
        return contextlib.nullcontext()
    current = jax.config.jax_default_matmul_precision
    if current is None:
        return contextlib.nullcontext()
    return _body(current, kernel_precision(current))


def mosaic_dot_precision(avals_in: Any, precision: Any) -> Any:
    """The precision Mosaic is asked to contract a dot at: `precision`, except None (one MXU
    pass) for a dot with no float32 operand. A bf16 (or integer, or fp8) product is exact in one
    pass whatever the precision, and Mosaic refuses a float32 contract precision for one ("Bad
    lhs type"): under `torch.set_float32_matmul_precision("high")` or `("highest")` every bf16
    Pallas matmul failed to compile on a TPU, its body traced at the default that float32 dots
    need. Applied to every Pallas TPU kernel lowered in the process once `traced_at` has run."""
    if precision is None or any(getattr(a, "dtype", None) == jnp.float32 for a in avals_in):
        return precision
    return None


def install() -> bool:
    """Install now what `traced_at` installs on first use (the Pallas kernel-tracing hook and the
    wrapper of Mosaic's dot lowering, `mosaic_dot_precision`): for code that lowers Pallas kernels
    whose dots carry an explicit precision, outside `traced_at` (Helion's, sources/helion_pallas.py).
    Whether the kernel-tracing hook is in place, as `_hook`."""
    return _hook()


def _hook() -> bool:
    """Whether Pallas's kernel tracing is wrapped (installed on first use), and with it Mosaic's
    lowering of dots (`mosaic_dot_precision`)."""
    global _hooked
    if _hooked is None:
        with _install_lock:
            if _hooked is None:
                if not _compat.wrap_mosaic_dot_lowering(mosaic_dot_precision):
                    warnings.warn(
                        f"tpu_kernels: JAX {jax.__version__} keeps no Mosaic lowering rule table "
                        "(jax._src.pallas.mosaic.lowering.lowering_rules), so a Pallas kernel's bf16 dot "
                        "traced at a 'high' or 'highest' float32 matmul precision asks Mosaic for a "
                        "float32 contraction, which it refuses ('Bad lhs type').",
                        RuntimeWarning,
                        stacklevel=3,
                    )
                _hooked = _compat.wrap_pallas_kernel_tracing(_in_kernel)
                if not _hooked:
                    warnings.warn(
                        f"tpu_kernels: JAX {jax.__version__} lacks jax._src.pallas.core.tracing_grid_env "
                        "or jax._src.pallas.mpmd.mpmd_map_tracing_context (the hooks where Pallas "
                        "traces a kernel body), so a kernel traced at a 'high' float32 matmul "
                        "precision is traced at 'highest' throughout (XLA dots too: more accurate "
                        "and slower than asked; Mosaic refuses HIGH inside Pallas kernels).",
                        RuntimeWarning,
                        stacklevel=3,
                    )
    return _hooked


__all__ = ["dot", "install", "kernel_precision", "mosaic_dot_precision", "requested", "traced_at"]
