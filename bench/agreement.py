"""Does the harness agree with a plain timing loop? Every candidate of the shipped suites.

For each point of the suites' quick sweeps, the harness runs as `tpu-kernels bench --quick`
would; then, for each candidate, a plain `time.perf_counter` loop times the same callable
over its own fresh input sets (as many as the harness rotated, each called twice first so it
is compiled and its views are cached), the same number of calls per sample, median of 5.
It prints harness / loop per candidate; issue 13 asks for agreement within 10%, or a note in
the report naming the effect that differs (the report's `notes`, printed beside).

    python bench/agreement.py [kernels tokamax_ops path/to/suite.py ...]
                              (default: kernels, every registered kernel family)

A plain script, not a suite: figures are printed, never asserted. Run it on a quiet machine:
other processes on the cores are the largest disagreement of all.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from tpu_kernels.bench import discover, runner, timing
from tpu_kernels.bench.device import resolve

DEFAULT = ("kernels",)  # bench/kernels.py: one benchmark per registered kernel family


def plain_loop(fn, arg_sets, calls: int, rounds: int = 5) -> float:
    for s in arg_sets:  # compiled, views cached: what the harness's warm-up leaves
        fn(*s)
        fn(*s)
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        out = None
        for i in range(calls):
            out = fn(*arg_sets[i % len(arg_sets)])
        if hasattr(out, "block_until_ready"):
            out.block_until_ready()
        samples.append((time.perf_counter() - t0) / calls)
    return statistics.median(samples)


def agreement(suites: list[str], device, settings) -> list[tuple]:
    """-> (benchmark, point, candidate, harness median, plain-loop median, report notes) rows,
    printed as they come. A suite is a shipped suite's name or a suite file's path."""
    shipped = discover.shipped_dir() or Path("bench")
    rows = []
    for name in suites:
        path = Path(name) if name.endswith(".py") else shipped / f"{name}.py"
        for b in discover.load(path, quick=True, device_type=device.type):
            for point in b.sweep(True):
                result = runner.run_point(b, point, device, settings, runner.Progress())
                fresh = {c.name: c for c in b.candidates(point)}
                for res in result.candidates:
                    if not res.median or res.name not in fresh:
                        continue
                    cand = fresh[res.name]
                    sets = [b.inputs(point, device.torch_device) for _ in range(result.input_sets)]
                    sets = [cand.prepare(s) if cand.prepare else s for s in sets]
                    loop = plain_loop(cand.fn, sets, res.calls_per_sample)
                    rows.append((b.name, result.point_id, res.name, res.median, loop, res.notes))
                    print(
                        f"{b.name:<12} {result.point_id:<28} {res.name:<16} harness {res.median * 1e6:9.1f} us"
                        f"  loop {loop * 1e6:9.1f} us  ratio {res.median / loop:5.2f}"
                        + (f"  note: {res.notes[0][:90]}" if res.notes else ""),
                        flush=True,
                    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("suites", nargs="*", default=list(DEFAULT))
    args = parser.parse_args()
    rows = agreement(args.suites, resolve(None), timing.quick(timing.Settings()))
    ratios = [h / loop for *_, h, loop, _ in rows]
    within = sum(abs(r - 1) <= runner.AGREEMENT for r in ratios)
    print(
        f"\n{within} of {len(ratios)} candidates within {runner.AGREEMENT:.0%}; ratio median "
        f"{statistics.median(ratios):.2f}, range {min(ratios):.2f}-{max(ratios):.2f}"
    )


if __name__ == "__main__":
    main()
