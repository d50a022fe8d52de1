"""Summary statistics of timing samples."""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass


def quantile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default 'linear' method) of sorted values."""
    if not sorted_values:
        raise ValueError("quantile of no samples")
    pos = (len(sorted_values) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


@dataclass(frozen=True)
class Summary:
    """Seconds per call over the timed samples."""

    median: float
    p10: float
    p25: float
    p75: float
    p90: float
    min: float
    max: float
    mean: float
    stdev: float
    cv: float  # coefficient of variation: stdev / mean
    n: int

    @classmethod
    def of(cls, samples: list[float]) -> Summary:
        s = sorted(samples)
        mean = statistics.fmean(s)
        stdev = statistics.stdev(s) if len(s) > 1 else 0.0
        return cls(
            median=quantile(s, 0.5),
            p10=quantile(s, 0.1),
            p25=quantile(s, 0.25),
            p75=quantile(s, 0.75),
            p90=quantile(s, 0.9),
            min=s[0],
            max=s[-1],
            mean=mean,
            stdev=stdev,
            cv=stdev / mean if mean > 0 else 0.0,
            n=len(s),
        )

    def to_dict(self) -> dict:
        return asdict(self)


def fmt_time(seconds: float | None) -> str:
    """Seconds as a person reads them: 3 significant digits in s, ms, us or ns ("-" for none)."""
    if seconds is None:
        return "-"
    for unit, scale in (("s", 1), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds * 1e9:.3g} ns"
