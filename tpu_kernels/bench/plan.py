"""What a run will time, and how long it should take: printed before the first point.

The estimate replays the harness's own protocol (`timing.py`) on what an earlier run measured
for the same benchmark, point and candidate: its first call `f` (compiling included), its
warm-up calls `w` and its time per call `t` (the median):

    f + w t + rounds (lead + c) t + (lead + 3 c) t       (the last term: the plain-loop check)
    c = ceil(min_sample_s / t) calls per sample,  lead = ceil(lead_in_s / t) lead-in calls

plus what that run spent on the point outside the candidates' calls (inputs, the float64
reference, the cost model): its recorded wall time less the same formula under its own settings.
So an unchanged rerun is estimated at what the earlier run took, and other `--rounds` or
`--quick` settings are accounted for. The earlier figures come from the newest report for
this device under ./bench-results, else from the reference report shipped for its type
(`bench/reports/<type>.json`, refreshed with the docs: docs/performance.md). A point that
none of them timed is counted at the median of the points that were (or `UNKNOWN_POINT_S`
when none was), and the printed estimate says how many points that is.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tpu_kernels.bench.results import PointResult, Report, ReportError
from tpu_kernels.bench.spec import Benchmark, Point, format_value, point_id
from tpu_kernels.bench.timing import Settings, calls_for, lead_calls

UNKNOWN_POINT_S = 5.0
"""A point's estimate when no earlier run timed any point of the plan: a few candidates, each
compiled once and timed for `rounds` short samples."""

RECENT_REPORTS = 20  # the newest reports under ./bench-results that are read for figures


def candidate_seconds(
    t: float, first: float, warmup_calls: int, settings: Settings, *, rotating: bool = True
) -> float:
    """The harness's time on one candidate at one point (the module docstring's formula)."""
    c, lead = calls_for(t, settings), lead_calls(t, settings)
    total = first + warmup_calls * t + settings.rounds * (lead + c) * t
    if rotating:  # the plain loop over one input set, compared with the rotating median
        total += (lead_calls(t, settings) + 3 * c) * t
    return total


def _settings(report: Report) -> Settings:
    known = Settings.__dataclass_fields__
    return Settings(**{k: v for k, v in report.settings.items() if k in known})


@dataclass(frozen=True)
class Earlier:
    """A point as an earlier run measured it, and where that run's report is."""

    result: PointResult
    settings: Settings
    source: str

    def seconds(self, candidates: Sequence[str], settings: Settings) -> float:
        """This point with `candidates` under `settings`: the formula on each candidate's
        earlier figures, plus the earlier run's time on the point outside the formula.
        A candidate the earlier run did not time is counted at the median of those it did."""
        rotating = self.result.input_sets > 1

        def modelled(s: Settings) -> dict[str, float]:
            return {
                c.name: candidate_seconds(
                    c.median, c.first_call_s or 0.0, c.warmup_calls, s, rotating=rotating
                )
                for c in self.result.candidates
                if c.median is not None
            }

        now, then = modelled(settings), modelled(self.settings)
        failed = {c.name for c in self.result.candidates if c.error}  # they fail at once
        if not now:
            return self.result.wall_s or 0.0
        fill = statistics.median(now.values())
        outside = max(0.0, (self.result.wall_s or 0.0) - sum(then.values()))
        return outside + sum(now.get(name, 0.0 if name in failed else fill) for name in candidates)


@dataclass
class History:
    """Earlier measurements by (benchmark, point id): the first report given wins."""

    points: dict[tuple[str, str], Earlier] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)

    def add(self, report: Report, source: str) -> None:
        settings = _settings(report)
        new = {
            (r.benchmark, r.point_id): Earlier(r, settings, source)
            for r in report.results
            if (r.benchmark, r.point_id) not in self.points
        }
        if new:
            self.points.update(new)
            self.sources.append(source)

    def get(self, benchmark: str, point: str) -> Earlier | None:
        return self.points.get((benchmark, point))


def history(device: dict, reports_dir: Path, reference: Path | None) -> History:
    """Earlier runs on this device: the newest reports under `reports_dir` whose device has the
    same type and name, then the reference report `reference` (same type) if there is one.
    Unreadable files are skipped: an estimate is never a reason to stop a run."""
    found = History()
    recent = sorted(reports_dir.glob("*/report.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    candidates = [(p, True) for p in recent[:RECENT_REPORTS]]
    if reference is not None and reference.is_file():
        candidates.append((reference, False))
    for path, same_machine in candidates:
        try:
            report = Report.read_json(path)
        except ReportError:
            continue
        if report.device.get("type") != device.get("type"):
            continue
        if same_machine and report.device.get("name") != device.get("name"):
            continue
        found.add(report, str(path))
    return found


@dataclass(frozen=True)
class PlannedPoint:
    benchmark: str
    point_id: str
    candidates: tuple[str, ...]
    seconds: float | None  # None: no earlier run timed it
    source: str | None


@dataclass
class Plan:
    """The points a run will time, in order, each with its estimate."""

    sweep: str  # "quick", "reduced" or "full" (spec.SWEEPS)
    points: list[PlannedPoint]
    sources: list[str]
    rounds: int | None = None  # the timing rounds per point (Settings.rounds)

    @property
    def unknown(self) -> int:
        return sum(p.seconds is None for p in self.points)

    def fill_s(self) -> float:
        """What a point no earlier run timed is counted at."""
        known = [p.seconds for p in self.points if p.seconds is not None]
        return statistics.median(known) if known else UNKNOWN_POINT_S

    def total_s(self) -> float:
        fill = self.fill_s()
        return sum(fill if p.seconds is None else p.seconds for p in self.points)

    def by_benchmark(self) -> dict[str, list[PlannedPoint]]:
        out: dict[str, list[PlannedPoint]] = {}
        for p in self.points:
            out.setdefault(p.benchmark, []).append(p)
        return out


def make(
    benchmarks: Sequence[Benchmark], sweep: str, settings: Settings, earlier: History | None = None
) -> Plan:
    """The plan of a run of `benchmarks` at `sweep`, estimated from `earlier`."""
    earlier = earlier or History()
    points = []
    for b in benchmarks:
        for p in b.sweep(sweep == "quick", reduced=sweep == "reduced"):
            pid = point_id(p)
            names = tuple(c.name for c in b.candidates(p))
            seen = earlier.get(b.name, pid)
            seconds = seen.seconds(names, settings) if seen else None
            points.append(PlannedPoint(b.name, pid, names, seconds, seen.source if seen else None))
    used = [s for s in earlier.sources if any(p.source == s for p in points)]
    return Plan(sweep, points, used, settings.rounds)


def axes(points: Sequence[Point]) -> str:
    """The values each parameter takes over `points`: 'shape=512x512x512, 1024x1024x1024; dtype=float32'."""
    values: dict[str, list[str]] = {}
    for p in points:
        for k, v in p.items():
            text = format_value(v)
            if text not in values.setdefault(k, []):
                values[k].append(text)
    return "; ".join(f"{k}={', '.join(vs)}" for k, vs in values.items())


def duration(seconds: float) -> str:
    """A rough duration: '40 s', '3 min', '1 h 5 min'."""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    minutes = math.ceil(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def busy_note(load: float, cores: int) -> str | None:
    """A line after the estimate when other work holds the CPU cores (the 1-minute load average
    above their count): the estimate replays earlier runs and knows nothing of this one's company."""
    if load <= cores:
        return None
    return (
        f"note: this machine is busy (load average {load:.1f} on {_count(cores, 'core')}): "
        "expect the run to take longer than estimated"
    )


def describe(plan: Plan, benchmarks: Sequence[Benchmark], device_type: str) -> list[str]:
    """The lines printed before the run: per benchmark its points and estimate, then the total
    and where its figures come from."""
    sizes = {
        "quick": "--quick: one size per benchmark",
        "reduced": f"the reduced sizes, the default on {device_type} (--full for every size)",
        "full": "the full sizes",
    }[plan.sweep]
    by_name = {b.name: b for b in benchmarks}
    grouped = plan.by_benchmark()
    rounds = f", {_count(plan.rounds, 'round')} each" if plan.rounds else ""
    lines = [
        f"plan: {_count(len(plan.points), 'point')} of {_count(len(grouped), 'benchmark')}{rounds}, {sizes}"
    ]
    fill = plan.fill_s()
    width = max((len(n) for n in grouped), default=0)
    for name, pts in grouped.items():
        b = by_name[name]
        seconds = sum(fill if p.seconds is None else p.seconds for p in pts)
        sweep = b.sweep(plan.sweep == "quick", reduced=plan.sweep == "reduced")
        unknown = sum(p.seconds is None for p in pts)
        mark = f" ({unknown} without earlier figures)" if unknown else ""
        lines.append(
            f"  {name:<{width}}  {_count(len(pts), 'point'):>9} x {_count(len(pts[0].candidates), 'candidate')}"
            f"  ~{duration(seconds)}{mark}  {axes(sweep)}"
        )
    known = len(plan.points) - plan.unknown
    how = (
        f"{known} of {len(plan.points)} points from earlier runs ({', '.join(plan.sources)})"
        if known
        else "no earlier run timed these points"
    )
    if plan.unknown:
        how += f"; {plan.unknown} counted at {duration(fill)} each"
    lines.append(f"estimate: about {duration(plan.total_s())} ({how}; method: tpu_kernels/bench/plan.py)")
    return lines
