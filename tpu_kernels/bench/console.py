"""The console view: a progress bar while running, then one table per benchmark."""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tpu_kernels.bench import plan, runner
from tpu_kernels.bench.results import PointResult, Report
from tpu_kernels.bench.stats import fmt_time as fmt_time  # shared by the reports and the tuner


def progress_bar(console: Console, *more: TextColumn) -> Progress:
    """The bar long runs draw in a terminal (the benchmarks', tuning's): what, how far, how long
    (and `more` columns: the benchmarks' estimate)."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        *more,
        console=console,
        transient=True,
    )


class RichProgress(runner.Progress):
    def __init__(self, console: Console, estimate_s: float | None = None) -> None:
        of = [TextColumn(f"of ~{plan.duration(estimate_s)}")] if estimate_s else []
        self._progress = progress_bar(console, *of)
        self._task = None
        self._where = ""
        self._points, self._done = 0, 0

    def start(self, total: int, points: int = 0) -> None:
        self._progress.start()
        self._task = self._progress.add_task("benchmarks", total=total)
        self._points, self._done = points, 0

    def point(self, benchmark: str, point: str) -> None:
        self._done += 1
        self._where = f"{self._done}/{self._points} {benchmark} {point}"
        self._progress.update(self._task, description=escape(self._where))

    def advance(self, candidate: str | None = None) -> None:
        label = f"{self._where} {candidate}" if candidate else self._where
        self._progress.update(self._task, advance=1, description=escape(label))

    def stop(self) -> None:
        self._progress.stop()


class LineProgress(runner.Progress):
    """Without a terminal (CI logs, pipes): one line per finished point, so a long run shows
    that it is alive and where it is."""

    def __init__(
        self,
        console: Console,
        clock: Callable[[], float] = time.monotonic,
        estimate_s: float | None = None,
    ) -> None:
        self._console, self._clock = console, clock
        self._t0 = clock()
        self._points, self._done = 0, 0
        self._of = f" of ~{plan.duration(estimate_s)}" if estimate_s else ""

    def start(self, total: int, points: int = 0) -> None:
        self._t0 = self._clock()
        self._points, self._done = points, 0

    def finished(self, result: PointResult) -> None:
        self._done += 1
        parts = [f"{c.name} " + ("error" if c.error else fmt_time(c.median)) for c in result.candidates]
        count = f" {self._done}/{self._points}" if self._points else ""
        self._console.print(
            f"[{self._clock() - self._t0:6.1f} s{self._of}{count}] {result.benchmark} {result.point_id}: "
            + ", ".join(parts),
            markup=False,
            highlight=False,
        )


def progress_for(console: Console, estimate_s: float | None = None) -> runner.Progress:
    """A progress bar in a terminal (elapsed time, samples done; its label names the point, k/N);
    elsewhere one line per finished point, with the elapsed time against `estimate_s`."""
    if console.is_terminal:
        return RichProgress(console, estimate_s)
    return LineProgress(console, estimate_s=estimate_s)


def _num(x: float | None, spec: str = ".3g") -> str:
    return "-" if x is None else format(x, spec)


def verdict(check: dict | None) -> str:
    """The table's "correct" cell: ok, or WRONG with the error as a multiple of what its dtype
    allows (bench.correctness), e.g. "WRONG (3.1e+02x allowed)"."""
    if check is None:
        return "-"
    if check["passed"]:
        return "[green]ok[/]"
    return f"[bold red]WRONG[/] ({check['ratio']:.2g}x allowed)"


def render(report: Report, console: Console) -> None:
    dev = report.device
    console.print(f"[bold]device[/]: {dev['type']} ({dev['name']})   [bold]timer[/]: {report.timer}")
    for note in report.notes:
        console.print(f"[yellow]note[/]: {note}")
    by_bench: dict[str, list] = {}
    for r in report.results:
        by_bench.setdefault(r.benchmark, []).append(r)
    roof = dev.get("peaks") is not None
    for name, points in by_bench.items():
        table = Table(title=name, title_justify="left", show_lines=False)
        for col in ("point", "candidate", "median", "p10 / p90", "cv", "speed-up", "first call", "correct"):
            table.add_column(col, justify="right" if col not in ("point", "candidate") else "left")
        table.add_column("TFLOP/s" if not roof else "TFLOP/s (% peak)", justify="right")
        table.add_column("GB/s" if not roof else "GB/s (% peak)", justify="right")
        for r in points:
            for i, c in enumerate(r.candidates):
                label = escape(c.name + (f" [{c.implementation}]" if c.implementation else ""))
                if c.error:
                    table.add_row(
                        r.point_id if i == 0 else "", label, "[red]error[/]", escape(c.error[:60]), *[""] * 6
                    )
                    continue
                t = c.time or {}
                correct = verdict(c.check)
                tp = c.throughput
                flops = _num(tp.get("tflops"))
                gbps = _num(tp.get("gbps"))
                if roof:
                    flops += (
                        f" ({_num(tp.get('pct_peak_flops'), '.0f')}%)" if tp.get("pct_peak_flops") else ""
                    )
                    gbps += f" ({_num(tp.get('pct_peak_bw'), '.0f')}%)" if tp.get("pct_peak_bw") else ""
                table.add_row(
                    r.point_id if i == 0 else "",
                    label,
                    fmt_time(t.get("median")),
                    f"{fmt_time(t.get('p10'))} / {fmt_time(t.get('p90'))}",
                    _num(t.get("cv"), ".2f"),
                    "-" if c.speedup is None else f"{c.speedup:.2f}x",
                    fmt_time(c.first_call_s),
                    correct,
                    flops,
                    gbps,
                )
        console.print(table)
        for r in points:
            for c in r.candidates:
                for note in c.notes:
                    console.print(f"  [yellow]note[/] {escape(r.point_id)} {escape(c.name)}: {escape(note)}")
    if not roof:
        console.print(
            "roofline: not meaningful on this device (no peak figures); TFLOP/s and GB/s are achieved rates."
        )
