"""`tpu-kernels compare`: compare two benchmark reports; exit 3 on regressions, 4 when inconclusive.

Points are matched by benchmark, point and candidate. Only the op under test regresses (the
primary candidate; torch and the other baselines are yardsticks, shown but never a regression):
a median slower than before by more than --threshold, with the two runs' spreads apart (the new
p10 above the old p90) and, where the point's baseline ran in both, slower relative to it by more
than --threshold too; or a result that was right (or ran) before and is wrong (or fails) now.
When the op is slower but the baseline slowed by more than --threshold beyond it (a busy
machine), the comparison is inconclusive: exit 4, never "ok"; run again on a quieter machine.
`tpu-kernels bench --compare` prints the same table after a run.

See docs/benchmarking.md ("Compare mode").
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tpu_kernels.commands._args import subcommand

EXIT_USAGE = 2  # a missing file, or one that is not a report
EXIT_REGRESSION = 3
EXIT_INCONCLUSIVE = 4  # the op slower, but the baseline moved far more: no verdict


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = subcommand(sub, "compare", __doc__)
    p.add_argument("baseline", type=Path, help="the earlier report.json")
    p.add_argument("current", type=Path, help="the report.json to check against it")
    p.add_argument(
        "--threshold",
        type=float,
        default=0.10,
        help="how much slower a median may get before it is a regression (default 0.10)",
    )
    p.add_argument(
        "--markdown",
        type=Path,
        metavar="FILE",
        help="also write the comparison as a Markdown table (for a PR)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from tpu_kernels.bench.results import Report, ReportError

    try:
        baseline, current = Report.read_json(args.baseline), Report.read_json(args.current)
    except ReportError as e:  # names the file and what to give instead
        print(f"tpu-kernels compare: {e}", file=sys.stderr)
        return EXIT_USAGE
    return print_comparison(Console(), baseline, current, args.threshold, markdown=args.markdown)


def print_comparison(console, baseline, current, threshold: float, markdown: Path | None = None) -> int:
    """Print how `current` (a `bench.results.Report`) compares with `baseline`, write it as a
    Markdown table to `markdown` if given; EXIT_REGRESSION if anything regressed, else
    EXIT_INCONCLUSIVE if a change cannot be judged, else 0."""
    from rich.table import Table

    from tpu_kernels.bench.compare import compare, inconclusive, markdown_table, regressions, verdict
    from tpu_kernels.bench.stats import fmt_time

    changes = compare(baseline, current, threshold)
    if markdown is not None:
        markdown.write_text(markdown_table(changes, threshold))
    table = Table(title=f"compared with baseline (threshold {threshold:.0%})", title_justify="left")
    for col in ("benchmark", "point", "candidate", "before", "after", "change", "verdict"):
        # folded, never cut: "shape=...,dtype=float32" and "...bfloat16" must stay distinguishable
        table.add_column(col, overflow="fold")
    for c in changes:
        change = "-" if c.ratio is None else f"{(c.ratio - 1) * 100:+.1f}%"
        text = verdict(c)
        if c.regressed or c.inconclusive:
            word = text.split()[0]
            text = text.replace(word, f"[bold {'red' if c.regressed else 'yellow'}]{word}[/]", 1)
        table.add_row(
            c.benchmark,
            c.point_id,
            c.candidate,
            fmt_time(c.old_median),
            fmt_time(c.new_median),
            change,
            text,
        )
    console.print(table)
    bad = regressions(changes)
    if bad:
        console.print(f"[bold red]{len(bad)} regression(s)[/]")
        return EXIT_REGRESSION
    unsure = inconclusive(changes)
    if unsure:
        console.print(
            f"[bold yellow]{len(unsure)} inconclusive[/] among {len(changes)} matched measurements: the "
            "baseline moved far more than the op under test; run again on a quieter machine"
        )
        return EXIT_INCONCLUSIVE
    console.print(f"no regressions among {len(changes)} matched measurements")
    return 0
