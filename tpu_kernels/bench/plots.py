"""PNG plots: median time per call against problem size, one line per candidate with its
p10-p90 band, one figure per benchmark; and `summary.png`, every candidate's speed-up over
the baseline across all benchmarks."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import ticker  # noqa: E402

from tpu_kernels.bench.results import Report  # noqa: E402

SUMMARY = "summary.png"


def _size(r) -> float:
    return r.bytes or r.flops or 0.0


def _log_axis(axis, lo: float, hi: float) -> None:
    """A log axis with few, plainly written labels: decades over a wide range, 1-2-5 steps
    over one to two decades, round values (1, 1.5, 2, 3, 5, 7 times a power of ten) over a
    narrow one; no minor labels, which on a log scale pile up into an unreadable column."""
    plain = ticker.FuncFormatter(lambda v, _: f"{v:.3g}")
    if hi / lo >= 100:
        axis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0,)))
    elif hi / lo >= 5:
        axis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    else:
        nice = [m * 10.0**e for e in range(-9, 10) for m in (1, 1.5, 2, 3, 5, 7)]
        inside = [v for v in nice if lo <= v <= hi]
        if len(inside) < 2:
            inside = [float(f"{lo * (hi / lo) ** (i / 3):.2g}") for i in range(4)]
        axis.set_major_locator(ticker.FixedLocator(inside))
    axis.set_major_formatter(plain)
    axis.set_minor_formatter(ticker.NullFormatter())


def write(report: Report, out_dir: Path) -> list[Path]:
    """One PNG per benchmark (a panel per dtype when the sweep has several), then the summary."""
    by_bench: dict[str, list] = defaultdict(list)
    for r in report.results:
        by_bench[r.benchmark].append(r)
    paths = [_benchmark_figure(report, name, points, out_dir) for name, points in by_bench.items()]
    summary = _summary_figure(report, out_dir)
    return paths + ([summary] if summary else [])


def _benchmark_figure(report: Report, name: str, points: list, out_dir: Path) -> Path:
    groups: dict[str, list] = defaultdict(list)
    for r in points:
        groups[str(r.point.get("dtype", ""))].append(r)
    fig, axes = plt.subplots(1, len(groups), figsize=(6 * len(groups), 4.5), squeeze=False)
    for ax, (dtype, rs) in zip(axes[0], sorted(groups.items())):
        rs = sorted(rs, key=_size)
        names = list(dict.fromkeys(c.name for r in rs for c in r.candidates))
        labels = [
            r.point_id.replace(f",dtype={dtype}", "").replace(f"dtype={dtype}", "") or r.point_id for r in rs
        ]
        lo, hi = math.inf, 0.0
        for cand in names:
            xs, med, p10, p90 = [], [], [], []
            for i, r in enumerate(rs):
                c = r.candidate(cand)
                if c is not None and c.median:
                    xs.append(i)
                    med.append(c.median * 1e3)
                    p10.append(c.time.get("p10", c.median) * 1e3)
                    p90.append(c.time.get("p90", c.median) * 1e3)
            if xs:
                (line,) = ax.plot(xs, med, marker="o", label=cand)
                ax.fill_between(xs, p10, p90, color=line.get_color(), alpha=0.18, linewidth=0)
                # and a bar per point, so a single point's spread shows too
                ax.vlines(xs, p10, p90, color=line.get_color(), alpha=0.6, linewidth=2)
                lo, hi = min(lo, *p10, *med), max(hi, *p90, *med)
        ax.set_xticks(range(len(rs)), labels, rotation=20, ha="right", fontsize=8)
        ax.set_yscale("log")
        if hi > 0:
            _log_axis(ax.yaxis, lo, hi)
        ax.set_ylabel("time per call (ms): median, band p10-p90")
        ax.set_title(f"{name}" + (f" ({dtype})" if dtype else ""))
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{report.device['type']}: {report.device['name']}", fontsize=9)
    fig.tight_layout()
    path = out_dir / f"{name}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def speedups(report: Report) -> dict[str, dict[str, float]]:
    """benchmark -> candidate -> geometric mean of its speed-ups over the benchmark's points
    (the baseline itself, at 1.0, is left out)."""
    logs: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in report.results:
        for c in r.candidates:
            if c.speedup and c.name != r.baseline:
                logs[r.benchmark][c.name].append(math.log(c.speedup))
    return {b: {c: math.exp(sum(v) / len(v)) for c, v in cands.items()} for b, cands in logs.items()}


def _summary_figure(report: Report, out_dir: Path) -> Path | None:
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
    ax.set_yticks(range(len(rows)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    _log_axis(ax.xaxis, min(values + [1.0]) / 1.2, max(values + [1.0]) * 1.2)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("speed-up over the baseline (geometric mean over points; > 1 is faster)")
    ax.set_title(f"all benchmarks, {report.device['type']}: {report.device['name']}", fontsize=9)
    ax.grid(True, axis="x", which="major", alpha=0.3)
    fig.tight_layout()
    path = out_dir / SUMMARY
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
