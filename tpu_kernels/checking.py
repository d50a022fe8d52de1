"""Checked mode: every op call also runs its reference, in float64, and raises on a mismatch.

    with tpu_kernels.checked():          # or TPU_KERNELS_CHECK=1 in the environment
        loss = model(x).sum()
        loss.backward()

While it is on, each call of a kernel op that has a reference goes through the
dispatcher (never the eager shortcut), then its reference runs on float64 CPU
copies of the same inputs, and each output is compared with the tolerance table
of `tpu_kernels.testing` for the output's dtype. The backward (run by autograd
inside checked mode) is compared with the reference's gradient (torch autograd
of a torch reference, `jax.vjp` of a JAX one) for the same incoming gradients.
A mismatch raises `CheckFailure` naming the op, its inputs' shapes and dtypes,
the largest error and its index, or the NaNs/infs the kernel produced where the
reference (rounded to the output's dtype) has none.

The switch is per thread (a ContextVar; new threads start from the environment
default, read at import). When it is off, an op call pays one read of the
module global `ARMED` (False unless the environment turned checking on or some
thread is inside `checked()`): about 12 ns (timeit) against a call's 60 us
(bench/overhead.py), too little for the per-call benchmark to resolve.

An op's reference for checking is `op.check_reference` (a `Reference`): given
with `check_reference=` (a torch function, or a `Reference` with tolerance
scales), else built from `reference=` (the differentiable JAX function that
also gives the backward, run in float64 with `jax.enable_x64`). The shipped
ops name their torch references, and so does each Tokamax op (`check_reference=` in its
family's `op.py`, tolerances from `tpu_kernels/tokamax/tolerance.py`). Ops without one
run unchecked.
Calls through `torch.ops.<ns>.<name>` directly and compiled graphs are not
checked: checking happens in `KernelOp.__call__` and the op's autograd backward.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
import threading
import warnings
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import torch

from tpu_kernels import _compat
from tpu_kernels.errors import OpDefinitionError, TpuKernelsError
from tpu_kernels.signature import Kind

if TYPE_CHECKING:
    from tpu_kernels.op import KernelOp

ENV = "TPU_KERNELS_CHECK"
BOUNDS_ENV = "TPU_KERNELS_CHECK_BOUNDS"


def _env_on(value: str | None) -> bool:
    return (value or "").strip().lower() not in ("", "0", "false", "no", "off")


_ENV_DEFAULT = _env_on(os.environ.get(ENV))
_STATE: ContextVar[bool | None] = ContextVar("tpu_kernels_checked", default=None)
_LOCK = threading.Lock()
_OPEN = 0  # checked() blocks open in any thread

ARMED: bool = _ENV_DEFAULT
"""False when no thread can be in checked mode: then `KernelOp.__call__` reads only this."""

BOUNDS: bool = _env_on(os.environ.get(BOUNDS_ENV))
"""Checked mode also runs each call of an op whose kernels read scalar prefetch through
`tpu_kernels.bounds` (its block indices against the arrays, then the TPU interpreter): set by
TPU_KERNELS_CHECK_BOUNDS=1, or assign it. Slow: for debugging index maps."""


class CheckFailure(TpuKernelsError, AssertionError):
    """Checked mode: a kernel's output or gradient differs from its reference."""


def is_checked() -> bool:
    """Whether this thread (context) is in checked mode now."""
    v = _STATE.get()
    return _ENV_DEFAULT if v is None else v


def active() -> bool:
    """Checked mode is on here and the call is eager (dynamo never traces the read)."""
    return not torch.compiler.is_compiling() and is_checked()


@contextlib.contextmanager
def checked(enabled: bool = True) -> Iterator[None]:
    """Run every kernel op call in this block beside its float64 reference (see module doc).

    `checked(False)` turns it off inside a checked block (or under TPU_KERNELS_CHECK=1).
    Applies to the current thread only; threads started inside start from the
    environment default.
    """
    global ARMED, _OPEN
    token = _STATE.set(bool(enabled))
    with _LOCK:
        _OPEN += 1
        ARMED = True
    try:
        yield
    finally:
        _STATE.reset(token)
        with _LOCK:
            _OPEN -= 1
            ARMED = _ENV_DEFAULT or _OPEN > 0


# ---- references ------------------------------------------------------------------------

Scale = float | Callable[[dict[str, Any]], float]


@dataclasses.dataclass(frozen=True)
class Reference:
    """What checked mode compares an op with.

    fn: a function of the op's parameters, by name, returning the op's visible
      outputs (residuals excluded); a torch function (differentiable by torch
      autograd) unless `jax=True` (then a JAX function with the op's signature).
    scale, grad_scale: multiply the tolerance table's atol, for the outputs and
      for the gradients (default: scale); a number or a function of the call's
      arguments by name (e.g. sqrt(K) for a K-long dot product).
    ignore: op parameters `fn` does not take because they cannot change the result
      (block sizes, implementation choice). Any other parameter `fn` does not take
      must be at its default for the call to be checked; otherwise checked mode
      warns once and leaves that call unchecked.
    """

    fn: Callable
    scale: Scale = 1.0
    grad_scale: Scale | None = None
    ignore: tuple[str, ...] = ()
    jax: bool = False

    def atol_scale(self, args: dict[str, Any], grad: bool) -> float:
        s = self.grad_scale if grad and self.grad_scale is not None else self.scale
        return float(s(args) if callable(s) else s)


def resolve(
    op: str, check_reference: Reference | Callable | None, reference: Callable | None
) -> Reference | None:
    """An op's reference for checking, from its `check_reference=` and `reference=` options."""
    if check_reference is not None:
        ref = check_reference if isinstance(check_reference, Reference) else Reference(check_reference)
        if not callable(ref.fn):
            raise OpDefinitionError(f"{op}: check_reference must be a function, got {ref.fn!r}.")
        if not ref.jax:
            try:
                inspect.signature(ref.fn)
            except (TypeError, ValueError) as e:
                raise OpDefinitionError(
                    f"{op}: check_reference {ref.fn!r} has no readable signature (checked mode passes "
                    "the op's arguments by name); wrap it, as in `lambda x: torch.exp(x)`."
                ) from e
        return ref
    if reference is not None:
        return Reference(reference, jax=True)
    return None


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
    if isinstance(t, torch.Tensor):
        t = t.detach().cpu()
        return t.to(torch.float64) if t.is_floating_point() else t.clone()
    if isinstance(t, (list, tuple)) and t and all(isinstance(x, torch.Tensor) for x in t):
        return [_wide(x) for x in t]
    return t


def _describe(op: KernelOp, values: list[Any]) -> str:
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


def _reference_kwargs(op: KernelOp, ref: Reference, values: list[Any]) -> dict[str, Any] | None:
    """The op's arguments the reference takes, by name; None when the call cannot be checked."""
    params = op.signature.params
    if ref.jax:
        return {p.name: v for p, v in zip(params, values)}
    accepted = inspect.signature(ref.fn).parameters
    if any(q.kind is inspect.Parameter.VAR_KEYWORD for q in accepted.values()):
        return {p.name: v for p, v in zip(params, values)}
    kwargs = {}
    for p, v in zip(params, values):
        if p.name in accepted:
            kwargs[p.name] = v
        elif p.name not in ref.ignore and not _is_default(v, p.default):
            _unchecked(op, f"its reference does not take '{p.name}' (given {v!r})")
            return None
    return kwargs


def _unchecked(op: KernelOp, why: str) -> None:
    """Warn, once per op and reason, that checked mode left calls unchecked."""
    if (op.name, why) not in _WARNED:
        _WARNED.add((op.name, why))
        warnings.warn(f"checked mode: {op.name}: {why}; such calls run unchecked.", stacklevel=5)


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


def _index(flat: int, shape: torch.Size) -> tuple[int, ...]:
    idx = []
    for d in reversed(shape):
        idx.append(flat % d)
        flat //= d
    return tuple(reversed(idx))


def compare(got: torch.Tensor, want: torch.Tensor, scale: float = 1.0) -> str | None:
    """Why `got` (a kernel's result) is not `want` (a float64 reference) within the
    tolerance of got's dtype, or None when it is."""
    from tpu_kernels.testing import TOL

    got = got.detach().cpu()
    want = want.detach().cpu()
    if tuple(got.shape) != tuple(want.shape):
        return f"shape {list(got.shape)}, the reference's is {list(want.shape)}"
    if got.numel() == 0:
        return None
    if not got.is_floating_point():
        bad = got != want.to(got.dtype)
        if bad.any():
            return (
                f"{int(bad.sum())} of {got.numel()} elements differ (exact compare for {got.dtype}); "
                + _first(bad, got, want)
            )
        return None
    tol = TOL.get(got.dtype, TOL[torch.float32])
    g, w = got.to(torch.float64), want.to(torch.float64)
    # The common case in few passes over the data (NaN/inf anywhere fail it: NaN compares
    # False, inf - inf is NaN); a failure is then diagnosed below.
    if ((g - w).abs() <= tol.atol * scale + tol.rtol * w.abs()).all():
        return None
    w_rounded = want.to(got.dtype).to(torch.float64)  # what the output dtype can represent
    g_bad = ~torch.isfinite(g)
    same_special = (g == w_rounded) | (torch.isnan(g) & torch.isnan(w_rounded))
    new_special = g_bad & ~same_special
    if new_special.any():
        n_nan = int((torch.isnan(g) & new_special).sum())
        n_inf = int(new_special.sum()) - n_nan
        return (
            f"{n_nan} NaN and {n_inf} inf values the reference does not have (of {got.numel()}); "
            + _first(new_special, g, w)
        )
    finite = torch.isfinite(g) & torch.isfinite(w)
    err = torch.where(finite, (g - w).abs(), torch.zeros_like(g))
    allowed = tol.atol * scale + tol.rtol * w.abs()
    lost = ~g_bad & ~torch.isfinite(w)  # finite where the reference is NaN or inf
    if lost.any():
        return (
            f"{int(lost.sum())} finite values where the reference has NaN or inf (of {got.numel()}); "
            + _first(lost, g, w)
        )
    mismatched = finite & (err > allowed)
    if not mismatched.any():
        return None
    i = int(err.flatten().argmax())
    return (
        f"max abs error {err.flatten()[i].item():.6g} at index {_index(i, got.shape)}: kernel "
        f"{g.flatten()[i].item():.8g}, reference {w.flatten()[i].item():.8g}; "
        f"{int(mismatched.sum())} of {got.numel()} elements beyond the {str(got.dtype).removeprefix('torch.')} "
        f"tolerance (rtol {tol.rtol:g}, atol {tol.atol:g} x {scale:g})"
    )


def _first(mask: torch.Tensor, got: torch.Tensor, want: torch.Tensor) -> str:
    """Where `mask` is first true, with the kernel's and the reference's values there."""
    i = int(mask.flatten().nonzero()[0])
    return (
        f"first at index {_index(i, got.shape)}: kernel {got.flatten()[i].item()}, "
        f"reference {want.flatten()[i].item()}"
    )


def _fail(op: KernelOp, what: str, values: list[Any], why: str, extra: str = "") -> None:
    raise CheckFailure(
        f"checked mode: {op.name} {what} differs from its reference: {why}\n"
        f"  inputs: {_describe(op, values)}{extra}\n"
        "  (docs/troubleshooting.md#a-models-loss-looks-wrong)"
    )


# ---- the hooks ------------------------------------------------------------------------------


def call(op: KernelOp, args: tuple, kwargs: dict) -> Any:
    """`KernelOp.__call__` in checked mode: the dispatcher's result, checked."""
    if BOUNDS:
        _check_bounds(op, args, kwargs)
    out = op.overload(*args, **kwargs)
    ref = op.check_reference
    if ref is None:
        return out
    values = op.signature.bind(args, kwargs)
    if not _can_check(values):
        return out
    check_forward(op, ref, values, out)
    return out


def _check_bounds(op: KernelOp, args: tuple, kwargs: dict) -> None:
    from tpu_kernels import bounds

    found = bounds.torch_call_problem(op, args, kwargs)
    if found is not None:
        raise CheckFailure(
            f"checked mode: {op.name}: {found.message}\n"
            f"  inputs: {_describe(op, op.signature.bind(args, kwargs))}\n"
            "  (docs/troubleshooting.md#index-maps-that-read-scalar-prefetch)"
        )


def check_forward(op: KernelOp, ref: Reference, values: list[Any], out: Any) -> None:
    wide = [_wide(v) for v in values]
    kwargs = _reference_kwargs(op, ref, wide)
    if kwargs is None:
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
    expected = expected[: op.n_visible]
    if len(expected) != len(outs):
        _fail(op, "output", values, f"the reference returned {len(expected)} outputs, the op {len(outs)}")
    scale = ref.atol_scale(dict(zip((p.name for p in op.signature.params), values)), grad=False)
    for k, (o, e) in enumerate(zip(outs, expected)):
        why = compare(o, e, scale)
        if why:
            name = op.output_names[k] if len(outs) > 1 else "output"
            _fail(op, name, values, why)


def check_backward(op: KernelOp, values: list[Any], grads_out: list[Any], grads_in: list[Any]) -> None:
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
    scale = ref.atol_scale(dict(zip((p.name for p in op.signature.params), values)), grad=True)
    extra = "; incoming gradients: " + ", ".join(
        f"{str(g.dtype).removeprefix('torch.')}{list(g.shape)}" for g in grads_out if g is not None
    )
    for p, got in zip(op.signature.params, grads_in):
        if p.kind not in (Kind.TENSOR, Kind.OPTIONAL_TENSOR) or got is None or p.name not in want_by_name:
            continue
        why = compare(got, want_by_name[p.name], scale)
        if why:
            _fail(op, f"gradient for '{p.name}'", values, why, extra)


__all__ = ["ENV", "CheckFailure", "Reference", "checked", "compare", "is_checked"]
