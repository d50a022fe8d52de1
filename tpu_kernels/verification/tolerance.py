"""What a kernel's result is compared with, and how closely: the tolerance table, the one rule
for results that sum many terms, and `Reference`, an op's declaration for checked mode.

This is the core's: checked mode (`checked_mode.py`) and the op declarations (`kernels/`,
`tokamax/`) read it; `tpu_kernels.testing` (above the core) re-exports the table for tests.

An output compared in dtype d is right when, element by element,

    |kernel - float64 reference| <= atol(d) * scale * growth(n, d) + rtol(d) * |reference|

with (rtol, atol) from `TOL`, `scale` the op's declared size of the values (1 for
unit-sized ones), and n the number of terms summed into each output (a K-long dot
product: K; 1 for an op that sums nothing). `growth` is the one rule (`reduction_scale`):
n for float32 and float64, sqrt(n) for 16-bit types. The measured errors that justify
it are in docs/dtypes.md#tolerances-the-tests-use.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from tpu_kernels.errors import OpDefinitionError


@dataclass(frozen=True)
class Tol:
    rtol: float
    atol: float


# Kernel output vs a float64 reference of the same inputs. The low-precision rows
# are about 2 ulps of the output format at magnitude 1 (bf16 ulp 2^-8, fp16 2^-11):
# kernels accumulate in float32, so the final rounding dominates.
# atol is absolute, sized for outputs of magnitude about 1: it checks nothing on outputs
# far smaller than that (bf16's 8e-3 is twice a softmax probability at 256 columns,
# 1/256 = 0.004), so such tests pass `scale` (softmax: 1/cols), and tests of a low-precision
# kernel's promise (float32 inside, one rounding at the end) use `testing.assert_ulps`
# instead, which is relative to each element: a kernel that does one more rounding fails it.
TOL: dict[torch.dtype, Tol] = {
    torch.float64: Tol(1e-10, 1e-12),
    torch.float32: Tol(2e-5, 2e-6),
    torch.float16: Tol(2e-3, 1e-3),
    torch.bfloat16: Tol(1.6e-2, 8e-3),
}


def tol(dtype: torch.dtype) -> Tol:
    """The table's row for `dtype` (float32's for a dtype it has no row for, e.g. float8)."""
    return TOL.get(dtype, TOL[torch.float32])


def reduction_scale(n: int, dtype: torch.dtype) -> float:
    """How much further than one element's atol a sum of `n` unit-sized terms may err in
    `dtype`: the rule every op's tolerance follows.

    float32/float64: n. Each of the n additions rounds a partial sum that grows like
    sqrt(k), so an accumulation's absolute error grows like n eps, largest relative to
    results near zero. 16-bit: sqrt(n). The float32 accumulation is far below the 16-bit
    atol and the final rounding is relative (rtol covers it), but a kernel that rounds each
    term to 16 bits before summing (flash attention's probabilities feed the MXU in bf16)
    adds n independent roundings. The measured errors, and the margin the rule leaves, are
    in docs/dtypes.md#tolerances-the-tests-use (tests/test_tolerance.py re-measures them).
    """
    n = max(int(n), 1)
    return float(n) if dtype in (torch.float32, torch.float64) else math.sqrt(n)


def rms(t: torch.Tensor | None) -> float:
    """Root mean square of `t` (1.0 for None, empty or non-floating tensors): the size of
    a reduction's terms, for `Reference(scale=...)`."""
    if t is None or not isinstance(t, torch.Tensor) or t.numel() == 0 or not t.is_floating_point():
        return 1.0
    return _size(t)


def _size(t: torch.Tensor) -> float:
    # float64 on the CPU; on a device (where float64 may not exist) float32, ample for a size
    wide = torch.float64 if t.device.type == "cpu" else torch.float32
    return t.detach().to(wide).square().mean().sqrt().item()


def rows(x: torch.Tensor, dim: int = -1) -> int:
    """The number of rows of `x` when `dim` is the row (at least 1): the length of the
    sum a weight's gradient takes when the weight is broadcast over those rows."""
    return max(1, x.numel() // max(x.shape[dim], 1)) if x.ndim else 1


# ---- Reference: an op's declaration for checked mode -----------------------------------

Number = float | int
Scale = Number | Mapping[str, Number] | Callable[..., Number | Mapping[str, Number]]


@dataclass(frozen=True)
class Reference:
    """What checked mode compares an op with, and how closely.

    fn: a function of the op's parameters, by name, returning the op's visible
      outputs (residuals excluded); a torch function (differentiable by torch
      autograd) unless `jax=True` (then a JAX function with the op's signature, or
      the part of it it needs: it gets the arguments its signature takes).
      For an op that mutates arguments, a torch `fn` updates its (float64) copies of
      them in place, as the op does; a JAX one returns their new values after the
      outputs.
    reduces, grad_reduces: how many terms each output (each gradient) sums: a
      K-long dot product reduces K; `reduction_scale` turns it into the tolerance's
      growth (n in float32, sqrt(n) in 16-bit types). Default 1 (an op that sums
      nothing); grad_reduces defaults to reduces. A mapping gives the outputs (by
      output name) or the gradients (by parameter name) their own, 1 for those it
      leaves out: a matmul's gradients are {"a": N, "b": M}, a broadcast weight's
      gradient {"weight": rows}.
    scale, grad_scale: further multiply the tolerance table's atol, for the outputs
      and the gradients (default: scale): the size of the summed terms (a matmul's
      rms(a) * rms(b)), or of values that grow without a sum (a mapping, too).
    Each of these four is a number, a mapping, or a function of the call's arguments
    by keyword returning one (`lambda a: a.shape[-1]`), which gets the op's parameters
    it names (all of them when it takes **kwargs).
    ignore: op parameters `fn` does not take because they cannot change the result
      (block sizes, implementation choice). Any other parameter `fn` does not take
      must be at its default for the call to be checked; otherwise checked mode
      warns once and leaves that call unchecked.
    computes_in: the widest dtype the op computes in, when it is narrower than some
      results (Tokamax's rope computes in float32 even for float64 inputs; its loss
      returns float32 from logits it rounds to bf16 for bf16 inputs): a wider result
      is held to this dtype's tolerance. A dtype, or a function of the call's
      arguments by keyword returning one.
    spot_check: whether checked mode also runs each new shape once with the first
      floating-point input scaled down to where an `eps` is not negligible (mean
      square about eps): an eps added in the wrong place is invisible at unit scale.
      None (default): when the op has a float parameter named `eps` or `epsilon`.
    """

    fn: Callable
    scale: Scale = 1.0
    grad_scale: Scale | None = None
    ignore: tuple[str, ...] = ()
    jax: bool = False
    # after the fields of the first Reference, so positional construction keeps its meaning
    reduces: Scale = 1
    grad_reduces: Scale | None = None
    computes_in: torch.dtype | Callable[..., torch.dtype] | None = None
    spot_check: bool | None = None

    def tolerance_dtype(self, dtype: torch.dtype, args: dict[str, Any] | None = None) -> torch.dtype:
        """The dtype whose tolerance a result of `dtype` is held to (`args`: the call's
        arguments, for a `computes_in` function)."""
        c = self.computes_in
        if callable(c):
            args = args or {}
            names = _keywords(c)
            c = c(**(args if names is None else {k: v for k, v in args.items() if k in names}))
        if c is not None and dtype.is_floating_point and dtype.itemsize > c.itemsize:
            return c
        return dtype

    def atol_scale(
        self, args: dict[str, Any], dtype: torch.dtype, *, grad: bool = False, name: str | None = None
    ) -> float:
        """The multiple of the atol of a `dtype` result the call's output `name` (with `grad`:
        the gradient for the parameter `name`) is allowed: scale * reduction_scale(reduces,
        dtype), each evaluated on `args` (the call's arguments by parameter name); the
        dtype is `computes_in` where that is narrower."""
        s = self.grad_scale if grad and self.grad_scale is not None else self.scale
        n = self.grad_reduces if grad and self.grad_reduces is not None else self.reduces
        growth = reduction_scale(int(_number(n, args, "reduces", name)), self.tolerance_dtype(dtype, args))
        return _number(s, args, "scale", name) * growth

    def reduction(self, args: dict[str, Any], name: str | None = None) -> int:
        """How many terms the output `name` sums for this call (`reduces`, evaluated)."""
        return int(_number(self.reduces, args, "reduces", name))

    def declared_reduction(self, args: dict[str, Any], name: str | None = None) -> int | None:
        """`reduction`, or None when `reduces` is left at its default (1, the plain number): the
        op declares nothing, and the autotuner assumes what the benchmark harness does."""
        if not callable(self.reduces) and not isinstance(self.reduces, Mapping) and self.reduces == 1:
            return None
        return self.reduction(args, name)

    def size(self, args: dict[str, Any], name: str | None = None) -> float:
        """The size of the output `name`'s terms for this call (`scale`, evaluated)."""
        return _number(self.scale, args, "scale", name)

    def functions(self) -> dict[str, Callable]:
        """The declared functions of the call's arguments, by field name."""
        fields = ("scale", "grad_scale", "reduces", "grad_reduces", "computes_in")
        return {f: getattr(self, f) for f in fields if callable(getattr(self, f))}


def _number(value: Any, args: dict[str, Any], what: str, name: str | None) -> float:
    """A declared number: `value`, or what it returns for `args`; a mapping gives the entry
    of the output or gradient `name` (1 where it has none)."""
    result = value
    if callable(value):
        names = _keywords(value)
        result = value(**(args if names is None else {k: v for k, v in args.items() if k in names}))
    if isinstance(result, Mapping):
        result = result.get(name, 1)
    if isinstance(result, bool) or not isinstance(result, numbers.Real):
        raise TypeError(f"Reference {what} {_name(value)} gave {result!r}; it must give a number.")
    return float(result)


@functools.lru_cache(maxsize=1024)
def _keywords(fn: Callable) -> frozenset[str] | None:
    """The keyword parameters of `fn`, or None when it takes **kwargs (then it gets all)."""
    params = inspect.signature(fn).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return frozenset(p.name for p in params if p.kind is not inspect.Parameter.VAR_POSITIONAL)


def _name(fn: Callable) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)


def _check_keywords(op: str, field: str, fn: Callable, params: Sequence[str]) -> None:
    """A declared function takes the op's parameters by keyword, or the op fails to define."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError) as e:
        raise OpDefinitionError(
            f"{op}: Reference {field}={fn!r} has no readable signature; write it as a function "
            f"of the op's parameters by keyword, e.g. `lambda {params[0]}: ...`."
        ) from e
    known = set(params)
    kinds = inspect.Parameter
    positional = [p.name for p in sig.parameters.values() if p.kind is kinds.POSITIONAL_ONLY]
    unknown = [
        p.name
        for p in sig.parameters.values()
        if p.kind in (kinds.POSITIONAL_OR_KEYWORD, kinds.KEYWORD_ONLY)
        and p.name not in known
        and p.default is kinds.empty
    ]
    if positional or unknown:
        why = (
            f"takes {', '.join(repr(b) for b in positional)} positionally only"
            if positional
            else f"takes {', '.join(repr(b) for b in unknown)}, which "
            f"{'is not a parameter' if len(unknown) == 1 else 'are not parameters'} of the op"
        )
        raise OpDefinitionError(
            f"{op}: Reference {field}={_name(fn)}{sig} {why} (its parameters: {', '.join(params)}). "
            f"It is called with the call's arguments by keyword: write it as "
            f"`lambda {', '.join(params[:2])}: ...` (or with **kwargs)."
        )


def resolve(
    op: str,
    params: Sequence[str],
    check_reference: Reference | Callable | None,
    reference: Callable | None,
) -> Reference | None:
    """An op's reference for checking, from its `check_reference=` and `reference=` options;
    `params`: the op's parameter names, which the declared functions must take by keyword."""
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
        for field, fn in ref.functions().items():
            _check_keywords(op, field, fn, params)
        return ref
    if reference is not None:
        return Reference(reference, jax=True)
    return None


def with_ignored(ref: Reference, *names: str) -> Reference:
    """`ref` for an op that also has the parameters `names`, which cannot change the result
    (a Pallas op's block sizes beside its Helion twin's declaration)."""
    return dataclasses.replace(ref, ignore=tuple(dict.fromkeys((*ref.ignore, *names))))


__all__ = ["TOL", "Reference", "Tol", "reduction_scale", "resolve", "rms", "rows", "tol", "with_ignored"]
