"""`tpu-kernels tune`: tune the block sizes (and other tunables) of the ops a target calls.

TARGET is one of:
  module:function   call function() once (it runs your model or ops on example inputs) and tune
                    every tunable op it calls, as `tpu_kernels.autotune(function)` does
  SUITE             a benchmark suite (bench/NAME.py, a shipped suite name, or a .py file): the op
                    under test at each of its points (--quick: the quick points)
  module            every tunable op the module defines, at its `examples=` calls; these are
                    TPU-sized, so use it with --chips for predicted TPU rankings (shapes only)

On the chip attached, every candidate is checked against the op's reference and timed by the
benchmark harness; for each TPU chip of --chips that is not attached, candidates are pruned by the
TPU check and ranked by the cost model, marked predicted, among those whose results are right (as
measured here, else run in the CPU interpreter, at a smaller shape when the call's is too big).
The entries are merged into each op's table (--out DIR, else $TPU_KERNELS_TUNING_DIR, else beside
the kernel); docs/autotuning.md.

Exit status: 0 tuned; 1 an op was left with no candidate that runs and is right (a measured one is
recorded as a failed entry, which calls refuse to run); 2 a usage error.

See docs/autotuning.md for declaring tunables, the tables, and what is measured and what predicted.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from tpu_kernels.commands._args import file_problem, folder_problem, regex_problem, subcommand

EXIT_NONE_SURVIVED = 1
EXIT_USAGE = 2


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = subcommand(sub, "tune", __doc__)
    p.add_argument("target", help="module:function, a benchmark suite, or a module (see above)")
    p.add_argument(
        "--chips",
        help="comma-separated chips to tune for, e.g. cpu,v5e,v6e,7x (default: the attached one); "
        "TPU chips that are not attached are predicted",
    )
    p.add_argument("--quick", action="store_true", help="a suite's quick points, and fewer timing rounds")
    p.add_argument("--rounds", type=int, help="interleaved timing rounds per candidate set")
    p.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="threads that compile a call's candidates ahead of checking and timing them one at a "
        "time (default: $TPU_KERNELS_TUNE_WORKERS, else 1: one at a time)",
    )
    p.add_argument("--filter", help="only ops (`ns::name` or `name`) and a suite's benchmarks whose name matches this regex")
    p.add_argument(
        "--device", metavar="TYPE", help="for a suite: the device its inputs go to (default: as bench)"
    )
    p.add_argument("--out", type=Path, metavar="DIR", help="write the tables here")
    p.add_argument("--no-save", action="store_true", help="report only; write no table")
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the result (every op's table) here")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from tpu_kernels.autotuner import TUNING, capture, tune_calls
    from tpu_kernels.bench import timing

    console = Console(width=None if sys.stdout.isatty() else 200, stderr=False)
    problem = (
        regex_problem("--filter", args.filter)
        or folder_problem("--out", args.out)
        or file_problem("--json", args.json)
    )
    if problem:
        print(f"tpu-kernels tune: {problem}", file=sys.stderr)
        return EXIT_USAGE
    chips = [c.strip() for c in args.chips.split(",") if c.strip()] if args.chips else None
    settings = timing.quick(TUNING) if args.quick else TUNING
    if args.rounds:
        settings = replace(settings, rounds=args.rounds)
    try:
        calls, what = _calls(args, capture)
    except _UsageError as e:
        print(f"tpu-kernels tune: {e}", file=sys.stderr)
        return EXIT_USAGE
    if args.filter:
        calls = [c for c in calls if re.search(args.filter, c.op.name) or re.search(args.filter, c.op.short_name)]
    console.print(
        f"tuning {len(calls)} op call(s) from {what}" + (f" for {', '.join(chips)}" if chips else "")
    )
    if not calls:
        print(f"tpu-kernels tune: {what} calls no tunable op", file=sys.stderr)
        return EXIT_USAGE
    try:
        result = tune_calls(
            calls, chips=chips, settings=settings, progress=_progress(console), workers=args.workers
        )
    except ValueError as e:  # a chip that can be neither measured nor predicted here, or bad --workers
        print(f"tpu-kernels tune: {e}", file=sys.stderr)
        return EXIT_USAGE
    console.print(result.report(), highlight=False, markup=False)
    if not args.no_save:
        for path in result.save(args.out):
            console.print(f"table written: {path}", highlight=False)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(result.to_json())
    return EXIT_NONE_SURVIVED if any(o.choice is None for o in result.outcomes) else 0


class _UsageError(Exception):
    pass


def _calls(args: argparse.Namespace, capture: Any) -> tuple[list, str]:
    target = args.target
    if ":" in target and not target.endswith(".py"):
        module_name, _, fn_name = target.partition(":")
        module = _import(module_name)
        fn = getattr(module, fn_name, None)
        if not callable(fn):
            raise _UsageError(f"{module_name} has no function {fn_name!r}")
        return capture(fn), target
    from tpu_kernels.bench import discover

    try:
        paths = discover.suite_files(target)
    except discover.SuiteNotFound:
        paths = []
    if paths:
        return _suite_calls(paths, args, capture), ", ".join(map(str, paths))
    from tpu_kernels.op import registered_ops

    before = set(registered_ops())
    module = _import(target)
    return _example_calls(module, before, args), f"the examples of {target}"


def _import(name: str) -> Any:
    sys.path.insert(0, str(Path.cwd()))  # as `python -m` would: the user's modules by name
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise _UsageError(
            f"cannot import {name!r} ({e}); TARGET is module:function, a benchmark suite or a module"
        ) from None


def _suite_calls(paths: list[Path], args: argparse.Namespace, capture: Any) -> list:
    from tpu_kernels.bench import discover
    from tpu_kernels.bench.device import resolve

    suites = [discover.import_suite(p) for p in paths]
    device = resolve(args.device)
    calls = []
    for suite in suites:
        for bench in discover.suite_benchmarks(suite, quick=args.quick, device_type=device.type):
            if args.filter and not re.search(args.filter, bench.name):
                continue
            for point in bench.sweep(args.quick):
                inputs = bench.inputs(point, device.torch_device)
                for cand in bench.candidates(point):
                    if cand.primary:
                        prepared = cand.prepare(inputs) if cand.prepare else inputs
                        calls += capture(cand.fn, *prepared)
    return calls


def _example_calls(module: Any, before: set[str], args: argparse.Namespace) -> list:
    """Each tunable op with `examples=` that `module` defines (registered by importing it, or
    whose kernel function it defines) at its examples: meta tensors (shapes only) when only
    TPU chips are predicted, random tensors when the attached chip is measured too."""
    import jax
    import torch

    from tpu_kernels import tunables
    from tpu_kernels.autotuner.capture import Call
    from tpu_kernels.definition import dtypes
    from tpu_kernels.op import registered_ops

    prefix = module.__name__
    ops = [
        op
        for name, op in registered_ops().items()
        if op.tunables is not None
        and op.examples is not None
        and (name not in before or getattr(op.__wrapped__, "__module__", "").startswith(prefix))
    ]
    if not ops:
        raise _UsageError(f"{prefix} defines no op with tune= and examples=")
    chips = [c.strip() for c in (args.chips or "").split(",") if c.strip()]
    measure = not chips or tunables.chip_of("cpu") in chips
    calls = []
    for op in ops:
        for ex_args, ex_kwargs in op.examples():

            def tensor(v: Any, op: Any = op) -> Any:
                if isinstance(v, jax.ShapeDtypeStruct):
                    dtype = dtypes.to_torch(op.name, v.dtype)
                    if not measure:
                        return torch.empty(v.shape, dtype=dtype, device="meta")
                    if dtype.is_floating_point:
                        return torch.randn(v.shape).to(dtype)
                    return torch.zeros(v.shape, dtype=dtype)
                return v

            calls.append(
                Call(op, tuple(tensor(a) for a in ex_args), {k: tensor(v) for k, v in ex_kwargs.items()}, "tunable")
            )
    return calls


class _BarProgress:
    """A rich progress bar on a terminal, one line per finished unit elsewhere."""

    def __init__(self, console: Any) -> None:
        from tpu_kernels.bench.console import progress_bar

        self.console = console
        self.live = console.is_terminal
        self.bar = progress_bar(console)
        self.task = None

    def start(self, total: int) -> None:
        if self.live:
            self.bar.start()
            self.task = self.bar.add_task("tuning", total=total)

    def step(self, text: str) -> None:
        if self.live:
            from rich.markup import escape

            self.bar.update(self.task, description=escape(text))

    def advance(self, text: str) -> None:
        if self.live:
            self.bar.update(self.task, advance=1)
        else:
            self.console.print(f"tuned: {text}", highlight=False, markup=False)

    def stop(self) -> None:
        if self.live:
            self.bar.stop()


def _progress(console: Any) -> Any:
    from tpu_kernels.autotuner import Progress

    class Bar(_BarProgress, Progress):
        pass

    return Bar(console)
