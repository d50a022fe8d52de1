"""Checked mode: every op call also runs its reference, in float64, and raises on a mismatch.

    with tpu_kernels.checked():          # or TPU_KERNELS_CHECK=1 in the environment
        loss = model(x).sum()
        loss.backward()

While it is on, each call of a kernel op that has a reference goes through the
dispatcher (never the eager shortcut), then its reference runs on float64 CPU
copies of the same inputs, and each output is compared with the tolerance of
`tpu_kernels.verification.tolerance` for the output's dtype: the table's atol times the op's
declared `scale` and the growth its declared reduction length gives
(`Reference(reduces=...)`, one rule for every op). The backward (run by autograd
inside checked mode) is compared with the reference's gradient (torch autograd
of a torch reference, `jax.vjp` of a JAX one) for the same incoming gradients.
A mismatch raises `CheckFailure` naming the op, its inputs' shapes and dtypes,
the largest error and its index, or the NaNs/infs the kernel produced where the
reference (rounded to the output's dtype) has none.

An op that writes to its arguments (`mutates_args`) is checked on what it writes: the
inputs are copied to float64 before the call, and the reference, given those copies,
updates the mutated arguments' copies in place as the op does (a JAX reference returns
their new values after its outputs); each mutated argument is compared with its copy.
The caller's tensors are only ever written by the op (the copies are never views of them).

Checked mode checks the caller's own calls, plus one spot check of its own per op and
input shapes for ops with an `eps` (`Reference(spot_check=...)`): the call rerun with
its first floating-point input scaled by a power of two to a mean square of about
eps, where an eps added in the wrong place shows (at unit scale it changes results by
about eps, far inside the tolerance).

The switch is per thread (a ContextVar; new threads start from the environment
default, read at import). When it is off, an op call pays one read of the
module global `ARMED` (False unless the environment turned checking on or some
thread is inside `checked()`): a few nanoseconds, too little for the per-call benchmark
(bench/overhead.py) to resolve.

An op's reference for checking is `op.check_reference` (a `tpu_kernels.Reference`):
given with `check_reference=` (a torch function, or a `Reference` with its
reduction lengths and scales), else built from `reference=` (the differentiable
JAX function that also gives the backward, run in float64 with `jax.enable_x64`).
Every shipped op and every Tokamax op declares one. A call that cannot be checked
(an op without a reference, a reference that does not take an argument given)
warns once per op and reason (`UncheckedWarning`) and runs unchecked; in strict
mode (`checked(strict=True)`, `TPU_KERNELS_CHECK=strict`) it raises
`UncheckedCallError` instead. Backward ops are checked through their forward's
backward check. Calls through `torch.ops.<ns>.<name>` directly and compiled graphs
are not checked: checking happens in `KernelOp.__call__` and the op's autograd backward.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import os
import re
import threading
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import torch

from tpu_kernels import _compat
from tpu_kernels.definition.signature import Kind
from tpu_kernels.errors import TpuKernelsError, warn_at_caller
from tpu_kernels.verification.compare import difference
from tpu_kernels.verification.tolerance import Reference, rms, tol

if TYPE_CHECKING:
    from tpu_kernels.definition.protocol import Op

ENV = "TPU_KERNELS_CHECK"
STRICT = "strict"  # TPU_KERNELS_CHECK=strict: checked mode, strict
BOUNDS_ENV = "TPU_KERNELS_CHECK_BOUNDS"


def _env_mode(value: str | None) -> tuple[bool, bool]:
    """(on, strict) from the environment variable's value."""
    v = (value or "").strip().lower()
    return v not in ("", "0", "false", "no", "off"), v == STRICT


_ENV_DEFAULT, _ENV_STRICT = _env_mode(os.environ.get(ENV))
_STATE: ContextVar[bool | None] = ContextVar("tpu_kernels_checked", default=None)
_STRICT: ContextVar[bool | None] = ContextVar("tpu_kernels_checked_strict", default=None)
_LOCK = threading.Lock()
_OPEN = 0  # checked() blocks open in any thread

ARMED: bool = _ENV_DEFAULT
"""False when no thread can be in checked mode: then `KernelOp.__call__` reads only this."""

BOUNDS: bool = _env_mode(os.environ.get(BOUNDS_ENV))[0]
"""Checked mode also runs each call of an op whose kernels read scalar prefetch through
`tpu_kernels.verification.bounds` (its block indices against the arrays, then the TPU interpreter): set by
TPU_KERNELS_CHECK_BOUNDS=1, or assign it. Slow: for debugging index maps."""


class CheckFailure(TpuKernelsError, AssertionError):
    """Checked mode: a kernel's output or gradient differs from its reference."""


class UncheckedCallError(TpuKernelsError, RuntimeError):
    """Strict checked mode: a call checked mode cannot check (the op declares no reference,
    or its reference does not take an argument the call gives or does not cover the call)."""


class UncheckedWarning(UserWarning):
    """Checked mode: calls of this op run unchecked (said once per op and reason)."""


def is_checked() -> bool:
    """Whether this thread (context) is in checked mode now."""
    v = _STATE.get()
    return _ENV_DEFAULT if v is None else v


def is_strict() -> bool:
    """Whether checked mode here raises, instead of warning, for a call it cannot check."""
    v = _STRICT.get()
    return _ENV_STRICT if v is None else v


def active() -> bool:
    """Checked mode is on here and the call is eager (dynamo never traces the read)."""
    return not torch.compiler.is_compiling() and is_checked()


@contextlib.contextmanager
def checked(enabled: bool = True, *, strict: bool | None = None) -> Iterator[None]:
    """Run every kernel op call in this block beside its float64 reference (see module doc).

    `checked(False)` turns it off inside a checked block (or under TPU_KERNELS_CHECK=1).
    `strict=True`: a call that cannot be checked (its op declares no reference, ...)
    raises `UncheckedCallError` instead of warning once; None keeps the enclosing
    setting (the environment's: TPU_KERNELS_CHECK=strict).
    Applies to the current thread only; threads started inside start from the
    environment default.
    """
    global ARMED, _OPEN
    token = _STATE.set(bool(enabled))
    strict_token = _STRICT.set(bool(strict)) if strict is not None else None
    with _LOCK:
        _OPEN += 1
        ARMED = True
    try:
        yield
    finally:
        if strict_token is not None:
            _STRICT.reset(strict_token)
        _STATE.reset(token)
        with _LOCK:
            _OPEN -= 1
            ARMED = _ENV_DEFAULT or _OPEN > 0


# ---- inputs ---------------------------------------------------------------------------


def _real(t: Any) -> bool:
    return type(t) in (torch.Tensor, torch.nn.Parameter) and t.device.type != "meta"


def _tensors(values: list[Any]) -> Iterator[torch.Tensor]:
    for v in values:
        if isinstance(v, torch.Tensor):
            yield v
        elif isinstance(v, (list, tuple)):
            yield from (t for t in v if isinstance(t, torch.Tensor))


def _can_check(values: list[Any]) -> bool:
    """Real tensors in plain eager mode: no fake/meta/functorch/dispatch-mode call."""
    if (
        _compat.get("torch_dispatch_stack_len")()
        or _compat.get("torch_function_mode_enabled")()
        or _compat.get("functorch_transforms_active")()
    ):
        return False
    return all(_real(t) for t in _tensors(values))


def _wide(t: Any) -> Any:
    """A float64 CPU copy of a tensor (never a view of it: a mutating reference writes to it)."""
    if isinstance(t, torch.Tensor):
        t = t.detach().cpu()
        return t.to(torch.float64, copy=True) if t.is_floating_point() else t.clone()
    if isinstance(t, (list, tuple)) and t and all(isinstance(x, torch.Tensor) for x in t):
        return [_wide(x) for x in t]
    return t


def _describe(op: Op, values: list[Any]) -> str:
    parts = []
    for p, v in zip(op.signature.params, values):
        if isinstance(v, torch.Tensor):
            parts.append(f"{p.name}: {str(v.dtype).removeprefix('torch.')}{list(v.shape)}")
        elif isinstance(v, (list, tuple)) and v and all(isinstance(t, torch.Tensor) for t in v):
            inner = ", ".join(f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}" for t in v)
            parts.append(f"{p.name}: [{inner}]")
        elif v is not None and v != p.default:
            parts.append(f"{p.name}={v!r}")
    return ", ".join(parts)


_WARNED: set[tuple[str, str]] = set()


def _reference_kwargs(op: Op, ref: Reference, values: list[Any]) -> dict[str, Any] | None:
    """The op's arguments the reference takes, by name; None when the call cannot be checked."""
    params = op.signature.params
    try:
        accepted = inspect.signature(ref.fn).parameters
    except (TypeError, ValueError):  # a JAX reference without a readable signature takes them all
        accepted = None
    if accepted is None or any(q.kind is inspect.Parameter.VAR_KEYWORD for q in accepted.values()):
        # **kwargs: a JAX reference (the op's signature) gets every argument, a torch one all
        # but the ignored (block sizes and other tunables)
        return {p.name: v for p, v in zip(params, values) if ref.jax or p.name not in ref.ignore}
    kwargs = {}
    for p, v in zip(params, values):
        if p.name in accepted:
            kwargs[p.name] = v
        elif p.name not in ref.ignore and not _is_default(v, p.default):
            _unchecked(op, f"its reference does not take '{p.name}' (given {v!r})")
            return None
    return kwargs


def _unchecked(op: Op, why: str, fix: str = "") -> None:
    """A call checked mode cannot check: in strict mode an error, else a warning, once per
    op and reason, that such calls run unchecked."""
    if is_strict():
        raise UncheckedCallError(f"checked mode (strict): {op.name}: {why}.{fix}")
    if (op.name, why) not in _WARNED:
        _WARNED.add((op.name, why))
        warn_at_caller(f"checked mode: {op.name}: {why}; such calls run unchecked.{fix}", UncheckedWarning)


_DECLARE = (
    " Declare what to compare it with: tpu_kernel(..., check_reference=fn), fn a torch function "
    "of the op's parameters by name returning its outputs (or tpu_kernels.Reference(fn, "
    "reduces=...) for an op whose outputs sum many terms), or reference= a JAX function "
    "(docs/autograd.md#checked-mode)."
)


def _is_default(v: Any, default: Any) -> bool:
    if isinstance(v, torch.Tensor) or isinstance(default, torch.Tensor):
        return v is default
    try:
        return bool(v == default)
    except Exception:  # noqa: BLE001 - an exotic value: not the default
        return False


def _as_list(out: Any) -> list[Any]:
    return list(out) if isinstance(out, (tuple, list)) else [out]


# ---- running the reference ----------------------------------------------------------------


def _jax_call(fn: Callable, kwargs: dict[str, Any], cotangents: list[Any] | None) -> tuple[list, list]:
    """A JAX reference on float64 arrays: its outputs, and with cotangents, jax.vjp's grads."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    def to_jax(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            return jnp.asarray(v.numpy())
        if isinstance(v, list) and v and all(isinstance(t, torch.Tensor) for t in v):
            return [to_jax(t) for t in v]
        return tuple(v) if isinstance(v, list) else v

    def to_torch(a: Any) -> torch.Tensor:
        return torch.from_numpy(np.array(a))

    with jax.enable_x64(True):
        arrays = {k: to_jax(v) for k, v in kwargs.items()}
        if cotangents is None:
            return [to_torch(o) for o in _as_list(fn(**arrays))], []
        names = [
            k for k, v in arrays.items() if hasattr(v, "dtype") and jnp.issubdtype(v.dtype, jnp.floating)
        ]

        def f(*diff: Any) -> tuple:
            return tuple(_as_list(fn(**{**arrays, **dict(zip(names, diff))})))

        outs, pullback = jax.vjp(f, *[arrays[n] for n in names])
        cts = tuple(
            jnp.zeros_like(o) if c is None else to_jax(c).astype(o.dtype) for o, c in zip(outs, cotangents)
        ) + tuple(jnp.zeros_like(o) for o in outs[len(cotangents) :])
        grads = dict(zip(names, pullback(cts)))
        return [to_torch(o) for o in outs], [(n, to_torch(g)) for n, g in grads.items()]


def _torch_grads(ref: Reference, kwargs: dict[str, Any], n: int, cotangents: list[Any]) -> list:
    names = [k for k, v in kwargs.items() if isinstance(v, torch.Tensor) and v.is_floating_point()]
    leaves = {k: kwargs[k].detach().requires_grad_(True) for k in names}
    with torch.enable_grad():
        outs = _as_list(ref.fn(**{**kwargs, **leaves}))[:n]
        pairs = [
            (o, c.to(o.dtype))
            for o, c in zip(outs, cotangents)
            if c is not None and o.requires_grad and o.is_floating_point()
        ]
        grads = (
            torch.autograd.grad(
                [o for o, _ in pairs], [leaves[k] for k in names], [c for _, c in pairs], allow_unused=True
            )
            if pairs
            else [None] * len(names)
        )
    return [(k, torch.zeros_like(leaves[k]) if g is None else g) for k, g in zip(names, grads)]


# ---- comparing -----------------------------------------------------------------------------


def compare(
    got: torch.Tensor, want: torch.Tensor, scale: float = 1.0, dtype: torch.dtype | None = None
) -> str | None:
    """Why `got` (a kernel's result) is not `want` (a float64 reference) within the
    tolerance of `dtype` (default: got's), its atol times `scale`, or None when it is
    (`tpu_kernels.verification.compare.difference`, the toolkit's one element-by-element rule)."""
    dtype = dtype or got.dtype
    t = tol(dtype) if got.is_floating_point() else tol(torch.float64)
    return difference(
        got,
        want,
        atol=t.atol * scale,
        rtol=t.rtol,
        rule=f"the {str(dtype).removeprefix('torch.')} tolerance (rtol {t.rtol:g}, atol {t.atol:g} x {scale:g})",
    )


def _fail(op: Op, what: str, values: list[Any], why: str, extra: str = "") -> None:
    raise CheckFailure(
        f"checked mode: {op.name} {what} differs from its reference: {why}\n"
        f"  inputs: {_describe(op, values)}{extra}\n"
        "  (docs/troubleshooting.md#a-models-loss-looks-wrong)"
    )


def _args(op: Op, values: list[Any]) -> dict[str, Any]:
    return {p.name: v for p, v in zip(op.signature.params, values)}


_NO_REDUCTION = (
    "\n  (its Reference declares no reduction: if each output sums n terms, declare "
    "Reference(..., reduces=n) and the tolerance grows with n, docs/dtypes.md#tolerances-the-tests-use)"
)


def reference_outputs(op: Op, args: tuple, kwargs: dict) -> list[torch.Tensor] | None:
    """The op's reference outputs (its visible ones) for a call, in float64 on the CPU: what
    checked mode compares the call with; None when the op has no reference or the reference
    does not cover the call (the autotuner then compares with the default config)."""
    ref = op.check_reference
    if ref is None:
        return None
    values = op.signature.bind(args, kwargs)
    kwargs_ = _reference_kwargs(op, ref, [_wide(v) for v in values])
    if kwargs_ is None:
        return None
    try:
        if ref.jax:
            expected, _ = _jax_call(ref.fn, kwargs_, None)
        else:
            with torch.no_grad():
                expected = _as_list(ref.fn(**kwargs_))
    except NotImplementedError:
        return None
    return [e.detach().to(torch.float64) if e.is_floating_point() else e for e in expected[: op.n_visible]]


# ---- the hooks ------------------------------------------------------------------------------


def call(op: Op, args: tuple, kwargs: dict) -> Any:
    """`KernelOp.__call__` in checked mode: the dispatcher's result, checked."""
    if BOUNDS:
        _check_bounds(op, args, kwargs)
    ref = op.check_reference
    before = None
    if op.mutates_args and ref is not None:
        # the reference gets the inputs as they were before the op wrote to them
        values = op.signature.bind(args, kwargs)
        before = [_wide(v) for v in values] if _can_check(values) else None
    out = op.overload(*args, **kwargs)
    values = op.signature.bind(args, kwargs)
    if not _can_check(values):
        return out
    if ref is None:
        if op.backward_of is None:  # a backward op is checked by its forward's backward check
            _unchecked(op, "it declares no reference (check_reference= or reference=)", _DECLARE)
        return out
    check_forward(op, ref, values, out, before=before)
    return out


def _check_bounds(op: Op, args: tuple, kwargs: dict) -> None:
    from tpu_kernels.verification import bounds

    found = bounds.torch_call_problem(op, args, kwargs)
    if found is not None:
        raise CheckFailure(
            f"checked mode: {op.name}: {found.message}\n"
            f"  inputs: {_describe(op, op.signature.bind(args, kwargs))}\n"
            "  (docs/troubleshooting.md#index-maps-that-read-scalar-prefetch)"
        )


def check_forward(
    op: Op,
    ref: Reference,
    values: list[Any],
    out: Any,
    spot: tuple[str, int, float] | None = None,
    before: list[Any] | None = None,
) -> None:
    """The call's outputs, and the arguments it mutated, against the reference's; then, for
    a call that is not itself a spot check (`spot`: the scaled input, its power of two and
    the eps), the op's spot check. `before`: for an op that mutates its arguments, float64
    copies of the arguments taken before the call (the reference's inputs)."""
    if op.mutates_args and before is None:
        return
    wide = before if before is not None else [_wide(v) for v in values]
    kwargs = _reference_kwargs(op, ref, wide)
    if kwargs is None:
        return
    mutated = _mutated_expected(op, ref, kwargs)
    if mutated is None:
        return
    outs = _as_list(out)[: op.n_visible]
    try:
        if ref.jax:
            expected, _ = _jax_call(ref.fn, kwargs, None)
        else:
            with torch.no_grad():
                expected = _as_list(ref.fn(**kwargs))
    except NotImplementedError as e:
        _unchecked(op, f"its reference does not cover this call ({e})")
        return
    if ref.jax and op.mutates_args:
        # a JAX reference returns, after the outputs, each mutated argument's new value
        new = expected[op.n_visible :]
        if len(new) != len(op.mutates_args):
            _fail(
                op,
                "output",
                values,
                f"the JAX reference returned {len(expected)} values; an op that mutates "
                f"{list(op.mutates_args)} needs its {op.n_visible} outputs, then the new value of each",
            )
        mutated = dict(zip(op.mutates_args, new))
    expected = expected[: op.n_visible]
    if len(expected) != len(outs):
        _fail(op, "output", values, f"the reference returned {len(expected)} outputs, the op {len(outs)}")
    args = _args(op, values)
    extra = "" if spot is None else _spot_note(*spot)
    if not callable(ref.reduces) and ref.reduces == 1:
        extra += _NO_REDUCTION
    for k, (o, e) in enumerate(zip(outs, expected)):
        why = compare(
            o, e, ref.atol_scale(args, o.dtype, name=op.output_names[k]), ref.tolerance_dtype(o.dtype, args)
        )
        if why:
            _fail(op, op.output_names[k] if len(outs) > 1 else "output", values, why, extra)
    for name, e in mutated.items():
        o = values[op.signature.index(name)]
        why = compare(o, e, ref.atol_scale(args, o.dtype, name=name), ref.tolerance_dtype(o.dtype, args))
        if why:
            _fail(op, f"mutated argument '{name}'", values, why, extra + _MUTATION_NOTE)
    if spot is None:
        _spot_check(op, ref, values)


_MUTATION_NOTE = (
    "\n  (the reference gets float64 copies of the inputs as they were before the call and "
    "updates the mutated arguments' copies in place, as the op does; a JAX reference returns "
    "their new values after its outputs: docs/autograd.md#checked-mode)"
)


def _mutated_expected(op: Op, ref: Reference, kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """The reference's copies of the arguments the op mutates, by name (a torch reference
    updates them in place when it runs; a JAX one returns them, filled in later); None when
    the reference does not take one of them (the call cannot be checked)."""
    if ref.jax:
        return {}
    missing = [n for n in op.mutates_args if n not in kwargs]
    if missing:
        _unchecked(op, f"its reference does not take the argument(s) it mutates {missing}")
        return None
    return {n: kwargs[n] for n in op.mutates_args}


def check_backward(op: Op, values: list[Any], grads_out: list[Any], grads_in: list[Any]) -> None:
    """The op's autograd backward in checked mode: its input gradients against the
    reference's for the same incoming gradients (`grads_in`: one per parameter)."""
    ref = op.check_reference
    if ref is None or not active() or not _can_check(values + list(grads_out)):
        return
    wide = [_wide(v) for v in values]
    kwargs = _reference_kwargs(op, ref, wide)
    if kwargs is None:
        return
    cts = [None if g is None else _wide(g) for g in grads_out]
    try:
        if ref.jax:
            _, want = _jax_call(ref.fn, kwargs, cts)
        else:
            want = _torch_grads(ref, kwargs, op.n_visible, cts)
    except NotImplementedError as e:
        _unchecked(op, f"its reference does not cover this call ({e})")
        return
    want_by_name = dict(want)
    args = _args(op, values)
    extra = "; incoming gradients: " + ", ".join(
        f"{str(g.dtype).removeprefix('torch.')}{list(g.shape)}" for g in grads_out if g is not None
    )
    reduces = ref.grad_reduces if ref.grad_reduces is not None else ref.reduces
    if not callable(reduces) and reduces == 1:
        extra += _NO_REDUCTION
    for p, got in zip(op.signature.params, grads_in):
        if p.kind not in (Kind.TENSOR, Kind.OPTIONAL_TENSOR) or got is None or p.name not in want_by_name:
            continue
        scale = ref.atol_scale(args, got.dtype, grad=True, name=p.name)
        why = compare(got, want_by_name[p.name], scale, ref.tolerance_dtype(got.dtype, args))
        if why:
            _fail(op, f"gradient for '{p.name}'", values, why, extra)


# ---- checked mode's own spot check: small magnitudes, where an eps matters ----------------------

_EPS_NAMES = re.compile(r"eps|epsilon")
_SMALL = 2.0**-20  # the mean square a spot check aims at without an eps: rms 2^-10, about 1e-3
_SPOT_SEEN: set[tuple] = set()  # (op, argument shapes, dtypes and statics) already spot-checked
_SPOT_LIMIT = 4096  # then no more spot checks: a process with endlessly new shapes pays nothing


def _spot_eps(op: Op, ref: Reference, values: list[Any]) -> float | None:
    """The mean square the op's spot check scales an input to (the op's eps), or None when
    the op gets no spot check."""
    if ref.spot_check is False or op.mutates_args:
        return None
    for p, v in zip(op.signature.params, values):
        if (
            not p.is_tensor
            and _EPS_NAMES.fullmatch(p.name)
            and isinstance(v, (int, float))
            and not isinstance(v, bool)
            and v > 0
        ):
            return float(v)
    return _SMALL if ref.spot_check else None


def _key(v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        return (v.dtype, tuple(v.shape), v.device.type)
    if isinstance(v, (list, tuple)):
        return tuple(_key(x) for x in v)
    return repr(v)


def _spot_check(op: Op, ref: Reference, values: list[Any]) -> None:
    """Once per op and input shapes: the call rerun with its first floating-point tensor
    scaled by a power of two (exact) to a mean square of about the op's eps, and checked.
    At unit scale an eps moved outside a sqrt changes results by about eps, which no
    tolerance sees; at this scale it changes them by tens of percent."""
    eps = _spot_eps(op, ref, values)
    if eps is None:
        return
    found = [
        (i, p.name)
        for i, (p, v) in enumerate(zip(op.signature.params, values))
        if p.kind is Kind.TENSOR and isinstance(v, torch.Tensor) and v.is_floating_point() and v.numel()
    ]
    if not found:
        return
    key = (op.name, _key(values))
    if key in _SPOT_SEEN or len(_SPOT_SEEN) >= _SPOT_LIMIT:
        return
    _SPOT_SEEN.add(key)
    i, name = found[0]
    x = values[i].detach()
    size = rms(x)
    if not math.isfinite(size) or size == 0:
        return
    power = round(math.log2(math.sqrt(eps) / size))
    if power >= 0:  # the call's own values are already that small
        return
    scaled = list(values)
    scaled[i] = x * 2.0**power
    n_pos = sum(not p.keyword_only for p in op.signature.params)
    kw = {p.name: v for p, v in zip(op.signature.params[n_pos:], scaled[n_pos:])}
    with torch.no_grad():
        out = op.overload(*scaled[:n_pos], **kw)
    check_forward(op, ref, scaled, out, spot=(name, power, eps))


def _spot_note(name: str, power: int, eps: float) -> str:
    return (
        f"\n  (checked mode's own spot check: the call as given passed; this is it again with "
        f"'{name}' scaled by 2^{power}, to a mean square near {eps:g}, where an eps added in the "
        "wrong place shows; Reference(spot_check=False) turns it off for an op whose inputs must "
        "keep their scale)"
    )


__all__ = [
    "ENV",
    "STRICT",
    "CheckFailure",
    "Reference",
    "UncheckedCallError",
    "UncheckedWarning",
    "checked",
    "compare",
    "is_checked",
    "is_strict",
]
