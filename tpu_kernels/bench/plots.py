"""PNG plots: one figure per benchmark, a panel per dtype (median time per call against the
points, one line per candidate with its p10-p90 band; a panel with a single point is a bar per
candidate, labelled with its median); and `summary.png`, every candidate's speed-up over the
baseline across all benchmarks, each bar labelled with its value.

The figures are built by `benchmark_figure` and `summary_figure` (matplotlib Figures, which
tests inspect) and saved by `write`."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import ticker  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from tpu_kernels.bench.results import PointResult, Report  # noqa: E402
from tpu_kernels.bench.stats import fmt_time  # noqa: E402

SUMMARY = "summary.png"

# Tick values per decade, coarse to fine: the coarsest giving at least MIN_TICKS labels in the
# axis's range is used (decades alone left summary.png with labels at 1 and 2 only).
LADDERS = (
    (1.0,),
    (1.0, 2.0, 5.0),
    (1.0, 1.5, 2.0, 3.0, 5.0, 7.0),
    (1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0),
)
MIN_TICKS = 4
MAX_TICKS = 10


def _size(r) -> float:
    return r.bytes or r.flops or 0.0


def log_ticks(lo: float, hi: float) -> list[float]:
    """Round values for a log axis from lo to hi: MIN_TICKS to MAX_TICKS of them where a
    ladder of round values gives that many (1-2-5 steps and finer), else four evenly spaced
    (on the log scale) values rounded to two significant digits."""
    first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    for subs in LADDERS:
        ticks = [float(f"{m * 10.0**e:.6g}") for e in range(first, last + 1) for m in subs]
        ticks = [t for t in ticks if lo <= t <= hi]
        while len(ticks) > MAX_TICKS:  # many decades: every other one
            ticks = ticks[::2]
        if len(ticks) >= MIN_TICKS:
            return ticks
    spaced = [float(f"{lo * (hi / lo) ** (i / 3):.2g}") for i in range(4)]
    return sorted({t for t in spaced if lo <= t <= hi} or {lo, hi})


def _log_axis(axis, lo: float, hi: float) -> None:
    """A log axis over [lo, hi] with plainly written round labels (`log_ticks`) and no minor
    labels, which on a log scale pile up into an unreadable column."""
    getattr(axis.axes, f"set_{axis.axis_name}lim")(lo, hi)
    axis.set_major_locator(ticker.FixedLocator(log_ticks(lo, hi)))
    axis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:.3g}"))
    axis.set_minor_formatter(ticker.NullFormatter())


def write(report: Report, out_dir: Path) -> list[Path]:
    """One PNG per benchmark (a panel per dtype when the sweep has several), then the summary."""
    by_bench: dict[str, list] = defaultdict(list)
    for r in report.results:
        by_bench[r.benchmark].append(r)
    paths = [
        _save(benchmark_figure(report, name, points), out_dir / f"{name}.png")
        for name, points in by_bench.items()
    ]
    summary = summary_figure(report)
    return paths + ([_save(summary, out_dir / SUMMARY)] if summary is not None else [])


def _save(fig: Figure, path: Path) -> Path:
    """Written and closed at once: a run with many benchmarks never holds their figures together."""
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _colors(points: list[PointResult]) -> dict[str, str]:
    """One colour per candidate, the same in every panel of a figure."""
    names = dict.fromkeys(c.name for r in points for c in r.candidates)
    return {name: f"C{i % 10}" for i, name in enumerate(names)}


def benchmark_figure(report: Report, name: str, points: list[PointResult]) -> Figure:
    groups: dict[str, list] = defaultdict(list)
    for r in points:
        groups[str(r.point.get("dtype", ""))].append(r)
    colors = _colors(points)
    fig, axes = plt.subplots(1, len(groups), figsize=(6 * len(groups), 4.5), squeeze=False)
    for ax, (dtype, rs) in zip(axes[0], sorted(groups.items())):
        rs = sorted(rs, key=_size)
        labels = [
            r.point_id.replace(f",dtype={dtype}", "").replace(f"dtype={dtype}", "") or r.point_id for r in rs
        ]
        if len(rs) == 1:
            _bars(ax, rs[0], labels[0], colors)
        else:
            _lines(ax, rs, labels, colors)
        ax.set_title(f"{name}" + (f" ({dtype})" if dtype else ""))
        ax.grid(True, axis="y", which="major", alpha=0.3)
    fig.suptitle(f"{report.device['type']}: {report.device['name']}", fontsize=9)
    fig.tight_layout()
    return fig


def _spread(c) -> tuple[float, float, float]:
    """(p10, median, p90) in milliseconds."""
    return (c.time.get("p10", c.median) * 1e3, c.median * 1e3, c.time.get("p90", c.median) * 1e3)


def _bars(ax, r: PointResult, label: str, colors: dict[str, str]) -> None:
    """One point: a bar per candidate up to its median, whiskers p10-p90, the median written
    above each (several candidates' dots at one x would hide one another)."""
    cands = [c for c in r.candidates if c.median]
    if not cands:
        return
    spreads = [_spread(c) for c in cands]
    lo = min(s[0] for s in spreads) / 2
    hi = max(s[2] for s in spreads) * 2.5  # room for the labels above the whiskers
    ax.set_yscale("log")
    _log_axis(ax.yaxis, lo, hi)
    xs = range(len(cands))
    meds = [s[1] for s in spreads]
    ax.bar(xs, [m - lo for m in meds], bottom=lo, color=[colors[c.name] for c in cands], alpha=0.8)
    ax.errorbar(
        xs,
        meds,
        yerr=[[m - s[0] for m, s in zip(meds, spreads)], [s[2] - m for m, s in zip(meds, spreads)]],
        fmt="none",
        ecolor="black",
        capsize=4,
        linewidth=1,
    )
    for x, c, s in zip(xs, cands, spreads):
        ax.text(x, s[2] * 1.1, fmt_time(c.median), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(list(xs), [c.name for c in cands], rotation=20, ha="right", fontsize=8)
    ax.set_xlabel(label, fontsize=8)
    ax.set_ylabel("time per call (ms): median, whiskers p10-p90")


def _lines(ax, rs: list[PointResult], labels: list[str], colors: dict[str, str]) -> None:
    names = list(dict.fromkeys(c.name for r in rs for c in r.candidates))
    lo, hi = math.inf, 0.0
    for cand in names:
        xs, med, p10, p90 = [], [], [], []
        for i, r in enumerate(rs):
            c = r.candidate(cand)
            if c is not None and c.median:
                a, m, b = _spread(c)
                xs.append(i)
                p10.append(a)
                med.append(m)
                p90.append(b)
        if xs:
            ax.plot(xs, med, marker="o", label=cand, color=colors[cand])
            ax.fill_between(xs, p10, p90, color=colors[cand], alpha=0.18, linewidth=0)
            # and a bar per point, so a point's spread shows where the band is narrow
            ax.vlines(xs, p10, p90, color=colors[cand], alpha=0.6, linewidth=2)
            lo, hi = min(lo, *p10), max(hi, *p90)
    ax.set_xticks(range(len(rs)), labels, rotation=20, ha="right", fontsize=8)
    ax.set_yscale("log")
    if hi > 0:
        _log_axis(ax.yaxis, lo / 1.3, hi * 1.3)
    ax.set_ylabel("time per call (ms): median, band p10-p90")
    ax.legend(fontsize=8)


def speedups(report: Report) -> dict[str, dict[str, float]]:
    """benchmark -> candidate -> geometric mean of its speed-ups over the benchmark's points
    (the baseline itself, at 1.0, is left out)."""
    logs: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in report.results:
        for c in r.candidates:
            if c.speedup and c.name != r.baseline:
                logs[r.benchmark][c.name].append(math.log(c.speedup))
    return {b: {c: math.exp(sum(v) / len(v)) for c, v in cands.items()} for b, cands in logs.items()}


def summary_figure(report: Report) -> Figure | None:
    table = speedups(report)
    rows = [(b, c, s) for b, cands in table.items() for c, s in cands.items()]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(8, 0.32 * len(rows) + 1.4))
    labels = [f"{b}: {c}" for b, c, _ in rows]
    values = [s for _, _, s in rows]
    colors = ["tab:green" if s >= 1 else "tab:red" for s in values]
    # bars grow from 1 (as fast as the baseline): right is faster, left is slower
    ax.barh(range(len(rows)), [v - 1 for v in values], left=1.0, color=colors, alpha=0.8)
    for i, v in enumerate(values):  # the value at the bar's end, outside it
        ax.text(v, i, f" {v:.2f}x ", va="center", ha="left" if v >= 1 else "right", fontsize=8)
    ax.set_yticks(range(len(rows)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    _log_axis(ax.xaxis, min(values + [1.0]) / 1.6, max(values + [1.0]) * 1.6)  # room for the values
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("speed-up over the baseline (geometric mean over points; > 1 is faster)")
    ax.set_title(f"all benchmarks, {report.device['type']}: {report.device['name']}", fontsize=9)
    ax.grid(True, axis="x", which="major", alpha=0.3)
    fig.tight_layout()
    return fig
