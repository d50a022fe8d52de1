"""`tpu-kernels bench`: run benchmark suites (bench/*.py), print the table, write a report.

See docs/benchmarking.md for the method and the report format.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import sys
import time
from dataclasses import replace
from pathlib import Path

from tpu_kernels.commands import compare
from tpu_kernels.commands._args import folder_problem, regex_problem, subcommand

EXIT_WRONG = 1
EXIT_USAGE = 2  # a user error: a missing suite or report, a file that is not a report, an unknown device
EXIT_REGRESSION = compare.EXIT_REGRESSION  # --compare exits as `tpu-kernels compare` would
EXIT_INCONCLUSIVE = compare.EXIT_INCONCLUSIVE
RESULTS_DIR = Path("bench-results")  # reports go to RESULTS_DIR/<UTC time>/ unless --out says otherwise


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = subcommand(sub, "bench", __doc__)
    p.add_argument(
        "target",
        nargs="?",
        help="a suite name (bench/NAME.py or a shipped suite), a .py file or a directory; "
        "default: every suite in ./bench, else the suites shipped with tpu_kernels",
    )
    p.add_argument("--suites", type=Path, metavar="DIR", help="take the suites from DIR instead")
    sizes = p.add_mutually_exclusive_group()
    sizes.add_argument(
        "--quick",
        action="store_true",
        help="one size per benchmark, fewer rounds, no torch.compile baseline",
    )
    sizes.add_argument(
        "--full",
        action="store_true",
        help="every size, also on a device whose default is the reduced sizes (a CPU: the Pallas "
        "interpreter makes the largest take many minutes); the default on accelerators",
    )
    p.add_argument(
        "--device",
        metavar="TYPE",
        help="a registered device type (tpu_kernels.runtime.devices, listed in docs/adding-a-device.md, and any "
        "a suite's imports register); default: the available accelerator, else cpu",
    )
    p.add_argument("--out", type=Path, help="report folder (default: bench-results/<UTC time>)")
    p.add_argument("--filter", help="only benchmarks whose name matches this regular expression")
    p.add_argument("--rounds", type=int, help="interleaved timing rounds per point")
    p.add_argument("--min-sample-ms", type=float, help="minimum duration of one timed sample")
    p.add_argument(
        "--device-time", action="store_true", help="also read device time from a jax.profiler trace (TPU)"
    )
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument(
        "--compare",
        type=Path,
        metavar="BASELINE.json",
        help="compare with a saved report; exit 3 on regressions, 4 when inconclusive",
    )
    p.add_argument(
        "--threshold", type=float, default=0.10, help="regression threshold for --compare (default 0.10)"
    )
    p.set_defaults(run=run)


def sweep_for(device_type: str, *, quick: bool = False, full: bool = False) -> str:
    """The sizes a run times (`bench.spec.SWEEPS`): --quick's, --full's, else the device's default
    (`DeviceSpec.bench_sweep`: "reduced" on a CPU, "full" on accelerators)."""
    from tpu_kernels.runtime import devices

    if quick and full:
        raise ValueError("--quick and --full ask for different sizes; give one")
    if quick:
        return "quick"
    if full:
        return "full"
    return devices.get(device_type).bench_sweep


def _cpu_seconds() -> float:
    """This process's CPU time so far: its threads' and its waited-for children's, user and system."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def run(args: argparse.Namespace) -> int:
    started, started_cpu = time.monotonic(), _cpu_seconds()
    from rich.console import Console

    from tpu_kernels.bench import console as bench_console
    from tpu_kernels.bench import discover, plan, runner, timing
    from tpu_kernels.bench.device import resolve

    console = Console(width=None if sys.stdout.isatty() else 200)
    problem = regex_problem("--filter", args.filter) or folder_problem("--out", args.out)
    if problem:
        print(f"tpu-kernels bench: {problem}", file=sys.stderr)
        return EXIT_USAGE
    baseline = None
    if args.compare:  # read it first: a bad baseline should not cost a whole run
        from tpu_kernels.bench.results import Report, ReportError

        try:
            baseline = Report.read_json(args.compare)
        except ReportError as e:
            print(f"tpu-kernels bench: --compare {e}", file=sys.stderr)
            return EXIT_USAGE
    try:
        paths = discover.suite_files(args.target, suites=args.suites)
    except discover.SuiteNotFound as e:  # its message names the folder or suite
        print(e, file=sys.stderr)
        return EXIT_USAGE
    console.print(f"suites: {', '.join(str(f) for f in paths)}", highlight=False)
    suites = [discover.import_suite(path) for path in paths]  # a suite may register a device
    try:
        device = resolve(args.device)
    except (ValueError, RuntimeError) as e:  # unregistered (the message names those that are), or absent here
        print(e, file=sys.stderr)
        return EXIT_USAGE
    benchmarks = []
    for suite in suites:
        benchmarks += discover.suite_benchmarks(suite, quick=args.quick, device_type=device.type)
    if args.filter:
        benchmarks = [b for b in benchmarks if re.search(args.filter, b.name)]
    if not benchmarks:
        where = ", ".join(map(str, paths)) or f"{args.target or discover.DEFAULT_DIR} (no suite files)"
        why = f"--filter {args.filter!r} matched none of" if args.filter and paths else "no benchmarks in"
        print(
            f"tpu-kernels bench: {why} {where}; a suite is a .py file defining `def benchmarks(`"
            " (see docs/benchmarking.md)",
            file=sys.stderr,
        )
        return EXIT_USAGE

    sweep = sweep_for(device.type, quick=args.quick, full=args.full)
    settings = timing.for_sweep(sweep)
    if args.rounds:
        settings = replace(settings, rounds=args.rounds)
    if args.min_sample_ms:
        settings = replace(settings, min_sample_s=args.min_sample_ms / 1e3)
    if args.device_time:
        settings = replace(settings, device_time=True)
    shipped = discover.shipped_dir()
    earlier = plan.history(
        device.to_dict(),
        RESULTS_DIR,
        shipped / "reports" / f"{device.type}.json" if shipped is not None else None,
    )
    the_plan = plan.make(benchmarks, sweep, settings, earlier)
    for line in plan.describe(the_plan, benchmarks, device.type):
        console.print(line, highlight=False, markup=False)
    busy = plan.busy_note(os.getloadavg()[0], os.cpu_count() or 1) if device.type == "cpu" else None
    if busy:
        console.print(busy, highlight=False, markup=False)

    report = runner.run(
        benchmarks,
        device,
        settings,
        quick=sweep == "quick",
        reduced=sweep == "reduced",
        progress=bench_console.progress_for(console, the_plan.total_s()),
    )
    bench_console.render(report, console)

    out = args.out or RESULTS_DIR / datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H-%M-%SZ")
    out.mkdir(parents=True, exist_ok=True)
    report.wall_s, report.cpu_s = time.monotonic() - started, _cpu_seconds() - started_cpu
    report.write_json(out / "report.json")
    report.write_csv(out / "report.csv")
    written = ["report.json", "report.csv"]
    if not args.no_plots:
        from tpu_kernels.bench import plots  # matplotlib: only where plots are asked for

        written += [p.name for p in plots.write(report, out)]
    console.print(f"report written to [bold]{out}[/]: {', '.join(written)}")

    status = 0
    wrong = [
        (r.benchmark, r.point_id, c.name)
        for r in report.results
        for c in r.candidates
        if c.primary and (c.wrong or c.error)
    ]
    if wrong:
        console.print(f"[bold red]{len(wrong)} point(s) of the op under test are wrong or failed[/]: {wrong}")
        status = EXIT_WRONG
    if baseline is not None:
        compared = compare.print_comparison(console, baseline, report, args.threshold)
        # a regression outranks a wrong result (as before); an inconclusive comparison does not
        status = compared if compared == EXIT_REGRESSION or status == 0 else status
    return status
