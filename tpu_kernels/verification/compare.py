"""How tpu_kernels compares a result with what it should be: one module, two criteria.

- **Element by element** (`difference`): every element within `atol + rtol * size` of the
  expected value (`size`: the expected value's magnitude, or a larger one the caller gives),
  integers exactly, and NaN/inf only where the expected result has them (rounded to the
  result's dtype first). Checked mode (`checked_mode.compare`: the tolerance table's atol
  and rtol for the dtype), the sharding simulation (`sharding.simulate.mismatch`: a relative rule
  with no absolute term) and the test helpers (`testing.assert_close`) all judge with it,
  each with its own allowance; the message says the same things in the same words for all.
- **Normwise** (`errors`): the relative 2-norm and max-norm errors of a whole result against
  a float64 reference, for the benchmark's correctness column and the autotuner, whose
  allowance (`bench.correctness.judge`) grows with the reduction length and the baseline's
  own error.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
import torch

# ---- element by element -----------------------------------------------------------------------


def index(flat: int, shape: Sequence[int]) -> tuple[int, ...]:
    """The multi-dimensional index of element `flat` of a row-major array of `shape`."""
    idx = []
    for d in reversed(tuple(shape)):
        idx.append(flat % d)
        flat //= d
    return tuple(reversed(idx))


def _at(mask: torch.Tensor, got: torch.Tensor, want: torch.Tensor, labels: tuple[str, str]) -> str:
    """Where `mask` is first true, with the two values there."""
    i = int(mask.flatten().nonzero()[0])
    return (
        f"first at index {index(i, got.shape)}: {labels[0]} {got.flatten()[i].item()}, "
        f"{labels[1]} {want.flatten()[i].item()}"
    )


def difference(
    got: torch.Tensor,
    want: torch.Tensor,
    *,
    atol: float,
    rtol: float,
    size: torch.Tensor | None = None,
    rule: str = "",
    labels: tuple[str, str] = ("kernel", "reference"),
) -> str | None:
    """Why `got` is not `want` element by element, or None when it is (see the module docstring).

    An element may differ by `atol + rtol * size`, `size` defaulting to |want|. `rule` names the
    allowance in the message (e.g. "the float32 tolerance (rtol ..., atol ...)"); `labels`
    name the two sides. A failure names how many elements differ, the first one, the largest
    error and the element farthest beyond its allowance."""
    got, want = got.detach().cpu(), want.detach().cpu()
    if tuple(got.shape) != tuple(want.shape):
        return f"shape {list(got.shape)}, the {labels[1]}'s is {list(want.shape)}"
    if got.numel() == 0:
        return None
    if not got.is_floating_point():
        bad = got != want.to(got.dtype)
        if bad.any():
            return (
                f"{int(bad.sum())} of {got.numel()} elements differ (exact compare for {got.dtype}); "
                + _at(bad, got, want, labels)
            )
        return None
    g, w = got.to(torch.float64), want.to(torch.float64)
    allowed = atol + rtol * (w.abs() if size is None else size.to(torch.float64))
    # The common case in a few passes (NaN/inf anywhere fail it: NaN compares False, inf - inf
    # is NaN); a failure is then diagnosed below.
    if ((g - w).abs() <= allowed).all():
        return None
    w_rounded = want.to(got.dtype).to(torch.float64)  # what the result's dtype can represent
    g_special = ~torch.isfinite(g)
    same_special = (g == w_rounded) | (torch.isnan(g) & torch.isnan(w_rounded))
    new_special = g_special & ~same_special
    if new_special.any():
        n_nan = int((torch.isnan(g) & new_special).sum())
        n_inf = int(new_special.sum()) - n_nan
        return f"{n_nan} NaN and {n_inf} inf values the {labels[1]} does not have (of {got.numel()}); " + _at(
            new_special, g, w, labels
        )
    lost = ~g_special & ~torch.isfinite(w)  # finite where the expected value is NaN or inf
    if lost.any():
        return (
            f"{int(lost.sum())} finite values where the {labels[1]} has NaN or inf (of {got.numel()}); "
            + _at(lost, g, w, labels)
        )
    finite = torch.isfinite(g) & torch.isfinite(w)
    err = torch.where(finite, (g - w).abs(), torch.zeros_like(g))
    bad = finite & (err > allowed)
    if not bad.any():
        return None
    first = int(bad.flatten().nonzero()[0])
    worst = int(err.flatten().argmax())
    ratio = torch.where(bad, err / allowed.clamp_min(torch.finfo(torch.float64).tiny), torch.zeros_like(err))
    far = int(ratio.flatten().argmax())
    allowed_far = float(allowed.flatten()[far]) if allowed.ndim else float(allowed)
    return (
        f"{int(bad.sum())} of {got.numel()} elements differ; the first at index {index(first, got.shape)}: "
        f"{labels[0]} {g.flatten()[first].item():.8g}, {labels[1]} {w.flatten()[first].item():.8g}; "
        f"max abs error {err.flatten()[worst].item():.6g} at index {index(worst, got.shape)}; "
        f"the farthest at index {index(far, got.shape)}: off by {err.flatten()[far].item():.3g}, "
        f"{ratio.flatten()[far].item():.3g} times the {allowed_far:.3g} allowed"
        + (f" by {rule}" if rule else "")
    )


# ---- normwise -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Errors:
    """A result's distance to the reference: relative 2-norm and max-norm errors, the largest
    absolute error, and whether the result is integer-valued (then only exact counts)."""

    norm2: float
    norm_max: float
    max_abs: float
    exact: bool = False

    @property
    def mismatch(self) -> bool:
        return math.isinf(self.norm2)


MISMATCH = Errors(math.inf, math.inf, math.inf)


def as_tensor(out: Any) -> torch.Tensor:
    """A result (tensor, JAX array, or a tuple whose first item is one) -> a CPU tensor of the
    result's own dtype (bfloat16 stays bfloat16, indices stay integers)."""
    if isinstance(out, (tuple, list)):
        out = out[0]
    if isinstance(out, jax.Array):
        try:
            return torch.from_dlpack(out).cpu()
        except (TypeError, RuntimeError, BufferError):  # a dtype or layout DLPack cannot carry
            return torch.from_numpy(np.asarray(out).astype(np.float64))
    return out.detach().cpu()


def errors(actual: Any, expected: torch.Tensor) -> Errors:
    """`actual`'s relative errors against the float64 `expected` (inf when the shapes differ
    or a value is NaN; equal infinities agree)."""
    a = as_tensor(actual)
    exact = not (a.is_floating_point() or a.is_complex())
    wide = torch.complex128 if a.is_complex() or expected.is_complex() else torch.float64
    a = a.to(wide)
    e = expected.detach().cpu().to(wide)
    if a.shape != e.shape:
        return MISMATCH
    if not e.numel():
        return Errors(0.0, 0.0, 0.0, exact)
    diff = torch.where(a == e, 0.0, (a - e).abs())  # equal infinities agree; NaN never does
    if bool(diff.isnan().any()) or bool(diff.isinf().any()):
        return Errors(math.inf, math.inf, math.inf, exact)
    finite = e.isfinite()
    scale2 = float(e[finite].norm()) if bool(finite.any()) else 0.0
    scale_max = float(e[finite].abs().max()) if bool(finite.any()) else 0.0
    tiny = torch.finfo(torch.float64).tiny
    return Errors(
        float(diff.norm()) / max(scale2, tiny),
        float(diff.max()) / max(scale_max, tiny),
        float(diff.max()),
        exact,
    )


__all__ = ["MISMATCH", "Errors", "as_tensor", "difference", "errors", "index"]
