"""Is a candidate's result right? Its error against a float64 reference, normwise, within
what the computation allows in its dtype (docs/benchmarking.md, "Correctness").

The error is measured (`tpu_kernels.verification.compare.errors`, the comparator every part of the toolkit
uses) in two norms, each relative to the reference's own norm:

- the 2-norm, the whole output's accuracy. A per-element relative tolerance cannot judge a
  sum: the exact column sums of random data include values near zero, whose relative error is
  large whatever the algorithm (the per-element rule this replaces marked torch's own
  `x.sum(0)` WRONG at random);
- the max-norm, so that one wrong element or block stands out instead of averaging away.

Each must be within

    allowed = scale * max(ROUNDINGS * u + ACCUMULATION * u_acc * sqrt(n),
                          BASELINE_FACTOR * the baseline candidate's own error)

with u the unit roundoff of the result's dtype, u_acc that of the accumulation dtype (float32,
float64 for float64 results) and n the length of the longest reduction behind an output element.
The first term is what a correct kernel may reach in its dtype on well-conditioned inputs: a few
roundings of the result, plus a float32 sum's error, which grows like sqrt(n) (probabilistic
rounding-error analysis, Higham and Mary 2019). The second follows the problem's conditioning and the device's arithmetic: a candidate no more than
BASELINE_FACTOR times less accurate than torch's own result in the same dtype. The baseline
itself is held to the first term only, and a baseline that fails it is no yardstick. The
measured figures behind the constants: `python bench/verdicts.py`, quoted in
docs/benchmarking.md ("Correctness").

Integer and bool results (indices, masks) must equal the reference exactly.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import torch

# The normwise distances are measured by the one comparator module; the allowance is this one's.
from tpu_kernels.verification.compare import MISMATCH as MISMATCH
from tpu_kernels.verification.compare import Errors as Errors
from tpu_kernels.verification.compare import as_tensor as as_tensor
from tpu_kernels.verification.compare import errors as errors

if TYPE_CHECKING:
    from tpu_kernels.bench.spec import Benchmark, Point

CRITERION = "normwise"
"""Names the rule in every report's checks, so `compare` can tell reports judged alike."""

ROUNDINGS = 3.0
"""Roundings of the result allowed (times u): one for the final rounding (at most u in the
max-norm), the rest for formulas that round several times, as torch's eager composites do
(bench/verdicts.py's "max err/u" column)."""

ACCUMULATION = 2.0
"""A float32 (float64) accumulation over n terms may add ACCUMULATION * u_acc * sqrt(n), a few
times what recursive summation, the least accurate textbook sum, reaches (bench/verdicts.py's
"/(u_acc sqrt n)" column)."""

BASELINE_FACTOR = 4.0
"""A candidate may be this many times less accurate than the baseline (torch in the same
dtype): room for a correct implementation of another algorithm of the same accuracy, such as
XLA's matmul beside torch's (bench/verdicts.py's "/torch" columns)."""


@dataclass(frozen=True)
class Check:
    """The verdict on one candidate, as the report stores it."""

    passed: bool
    error: float  # relative 2-norm error
    error_max: float  # relative max-norm error
    allowed: float  # what the 2-norm error may be
    allowed_max: float  # what the max-norm error may be
    max_abs_err: float
    reduction: int  # n, the reduction length the allowance assumed
    criterion: str = CRITERION

    @property
    def ratio(self) -> float:
        """The error as a multiple of what is allowed (the larger of the two norms'); > 1 fails."""
        return max(_ratio(self.error, self.allowed), _ratio(self.error_max, self.allowed_max))

    def to_dict(self) -> dict:
        return {**asdict(self), "ratio": self.ratio}


def _ratio(err: float, allowed: float) -> float:
    if err == 0:
        return 0.0
    return err / allowed if allowed > 0 else math.inf


def unit_roundoff(dtype: torch.dtype) -> float:
    """Half the spacing of dtype's numbers at 1: float32 2^-24, bfloat16 2^-8, float16 2^-11."""
    return torch.finfo(dtype).eps / 2


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """What kernels are expected to accumulate in: float64 for float64, float32 otherwise."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def a_priori(dtype: torch.dtype, reduction: int) -> float:
    """What a correct result in `dtype` may reach on well-conditioned inputs, relative:
    ROUNDINGS * u + ACCUMULATION * u_acc * sqrt(reduction)."""
    u_acc = unit_roundoff(accumulation_dtype(dtype))
    return ROUNDINGS * unit_roundoff(dtype) + ACCUMULATION * u_acc * math.sqrt(max(reduction, 1))


def result_dtype(point_dtype: torch.dtype, actual: Any) -> torch.dtype:
    """The dtype whose precision the result is judged in: the lower precision of the point's
    dtype and the output's own (a float32 result of a bfloat16 point is held to bfloat16, as
    its inputs were; a bfloat16 result of a float32 point to bfloat16)."""
    out = as_tensor(actual).dtype
    out = out.to_real() if out.is_complex else out
    if not out.is_floating_point:
        return point_dtype
    if not point_dtype.is_floating_point:
        return out
    return max(point_dtype, out, key=unit_roundoff)


def judge(
    errs: Errors,
    dtype: torch.dtype,
    *,
    reduction: int,
    scale: float = 1.0,
    baseline: Errors | None = None,
) -> Check:
    """The verdict for errors `errs` of a result judged in `dtype` (see the module docstring);
    `baseline`: the baseline candidate's errors, when it passed its own check."""
    if errs.exact:
        allowed = allowed_max = 0.0
    else:
        allowed = allowed_max = scale * a_priori(dtype, reduction)
        if baseline is not None and not baseline.mismatch:
            allowed = max(allowed, scale * BASELINE_FACTOR * baseline.norm2)
            allowed_max = max(allowed_max, scale * BASELINE_FACTOR * baseline.norm_max)
    passed = errs.norm2 <= allowed and errs.norm_max <= allowed_max
    return Check(passed, errs.norm2, errs.norm_max, allowed, allowed_max, errs.max_abs, reduction)


def verdicts(
    measured: dict[str, tuple[Errors, torch.dtype]],
    *,
    baseline: str | None,
    reduction: int,
    scale: float = 1.0,
) -> dict[str, Check]:
    """The verdict on each candidate of one point, from its errors and the dtype it is judged
    in (`result_dtype`): the baseline's against what its dtype allows, the others' also
    against BASELINE_FACTOR times the baseline's error when the baseline passed."""
    yardstick = None
    if baseline in measured:
        errs, dt = measured[baseline]
        if judge(errs, dt, reduction=reduction, scale=scale).passed:
            yardstick = errs
    return {
        name: judge(
            errs, dt, reduction=reduction, scale=scale, baseline=None if name == baseline else yardstick
        )
        for name, (errs, dt) in measured.items()
    }


def check(
    actual: Any,
    expected: torch.Tensor,
    dtype: torch.dtype,
    *,
    reduction: int,
    scale: float = 1.0,
    baseline: Any = None,
) -> Check:
    """One result against the float64 `expected`, judged in `dtype` (or the output's lower
    precision), beside the baseline's output `baseline` when there is one."""
    outputs = {"actual": actual} if baseline is None else {"actual": actual, "baseline": baseline}
    measured = {k: (errors(v, expected), result_dtype(dtype, v)) for k, v in outputs.items()}
    return verdicts(measured, baseline="baseline", reduction=reduction, scale=scale)["actual"]


def reduction_length(declared: int | None, inputs: tuple) -> int:
    """The reduction length a check assumes: the one declared (a benchmark's `reduction=`, an
    op reference's `reduces=`), else `default_reduction(inputs)`. The benchmark harness and the
    autotuner both judge by this rule."""
    return declared if declared is not None else default_reduction(inputs)


def default_reduction(inputs: tuple) -> int:
    """The reduction length assumed when a benchmark declares none: the largest dimension of
    any input tensor, at least as long as any reduction over one axis. Overestimating costs
    little (sqrt(n) * u_acc is 1e-5 relative at n = 2^14 in float32) and misses no gross bug."""
    dims = [d for t in inputs if isinstance(t, torch.Tensor) for d in t.shape]
    return max(dims, default=1)


@dataclass(frozen=True)
class PointJudge:
    """How one benchmark point judges its candidates: the float64 reference of its first input
    set, the dtype, reduction length and scale, and the baseline's name."""

    expected: torch.Tensor
    dtype: torch.dtype
    reduction: int
    scale: float
    baseline: str | None

    def measure(
        self, out: Any, to_torch: Callable[[Any], torch.Tensor] | None = None
    ) -> tuple[Errors, torch.dtype]:
        """A candidate's output -> its errors and the dtype it is judged in (kept, not the output)."""
        got = to_torch(out) if to_torch else out
        return errors(got, self.expected), result_dtype(self.dtype, got)

    def verdicts(self, measured: dict[str, tuple[Errors, torch.dtype]]) -> dict[str, Check]:
        return verdicts(measured, baseline=self.baseline, reduction=self.reduction, scale=self.scale)


def for_point(bench: Benchmark, point: Point, inputs: tuple) -> PointJudge | None:
    """The judge of `bench` at `point` given its first input set; None without a reference."""
    if bench.reference is None:
        return None
    up = tuple(
        t.detach().cpu().to(torch.float64)
        if isinstance(t, torch.Tensor) and t.is_floating_point()
        else (t.detach().cpu() if isinstance(t, torch.Tensor) else t)
        for t in inputs
    )
    out = bench.reference(*up, **bench.reference_kwargs(point))
    expected = out[0] if isinstance(out, (tuple, list)) else out
    dtype = point.get("dtype")
    if not isinstance(dtype, torch.dtype):  # no dtype axis, or one named otherwise
        dtype = _first_dtype(inputs)
    reduction = reduction_length(bench.reduction(point) if bench.reduction else None, inputs)
    return PointJudge(expected, dtype, reduction, bench.tolerance_scale(point), bench.baseline)


def _first_dtype(inputs: tuple) -> torch.dtype:
    for t in inputs:
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            return t.dtype
    return torch.float32
