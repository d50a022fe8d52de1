"""python -m tpu_kernels.mutate [FILE ...] [--tests PATH ...] [--templates | --toolkit]: mutation
score of kernels' (or the toolkit's) tests + check."""

from __future__ import annotations

import argparse
import fnmatch
import os
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from tpu_kernels.mutate import templates
from tpu_kernels.mutate.catalogue import SHIPPED, TOOLKIT
from tpu_kernels.mutate.operators import generate
from tpu_kernels.mutate.runner import Baseline, Limits, Outcome, repo_root, run_mutants

TARGET = 0.95


def _root(files: list[Path], tests: list[str]) -> Path:
    """The git work tree holding the first file, or (outside git) the folder holding the files
    and the tests: what the scratch copy copies."""
    root = repo_root(files[0])
    paths = [f.resolve() for f in files] + [Path(t.split("::")[0]).resolve() for t in tests]
    if all(p.is_relative_to(root) for p in paths):
        return root
    return Path(os.path.commonpath([p if p.is_dir() else p.parent for p in paths]))


def _relative(test: str, root: Path) -> str:
    """A test path given from the current folder, as a path from `root` (node ids kept)."""
    path, sep, node = test.partition("::")
    p = Path(path).resolve()
    return str(p.relative_to(root)) + sep + node if p.exists() and p.is_relative_to(root) else test


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tpu_kernels.mutate",
        description="Apply each mutant in a scratch copy of the repository, run the tests and "
        "`tpu-kernels check` on it, and report the score (mutants caught / total) and the survivors. "
        "Without FILE: the shipped kernels' catalogue (--templates: the templates' catalogue; "
        "--toolkit: the cache's, eager shortcut's, fakes', buckets', correctness verdict's and "
        "integrations' catalogue). A "
        "mutant whose run says nothing (a timeout, a collection error, a crash) is undetermined "
        "and left out of the score. Exit status 0 when the score is at least --target, 1 below it "
        "(or when no mutant was determined), 2 on a usage error.",
    )
    p.add_argument(
        "files",
        nargs="*",
        type=Path,
        metavar="FILE",
        help="kernel files to mutate with the generic operators",
    )
    p.add_argument("--tests", nargs="+", default=[], metavar="PATH", help="pytest paths that test FILE")
    p.add_argument(
        "--check",
        nargs="*",
        metavar="MODULE",
        help="modules for `tpu-kernels check` (default: FILE itself); give none to skip the check",
    )
    p.add_argument(
        "--races", action="store_true", help="also `check --races` for mutants of dimension semantics"
    )
    p.add_argument(
        "--chip",
        default="v5e",
        help="TPU generation the check targets (default v5e: the smallest default scoped VMEM)",
    )
    p.add_argument(
        "--only", action="append", metavar="GLOB", help="only mutants whose id matches (repeatable)"
    )
    p.add_argument(
        "--templates",
        action="store_true",
        help="the templates' catalogue: every template rendered with each of its backends, as "
        "`tpu-kernels new` writes it, mutated and run against its generated tests and check",
    )
    p.add_argument(
        "--toolkit",
        action="store_true",
        help="the toolkit's catalogue: mutants of the machinery around the kernels (the on-disk "
        "cache, the eager shortcut, derived fakes, buckets, the benchmark's correctness verdict, "
        "the torchtitan and Hugging Face integrations), run against their tests",
    )
    p.add_argument("--list", action="store_true", help="list the mutants and exit")
    p.add_argument("--target", type=float, default=TARGET, help="the score to reach (default 0.95)")
    p.add_argument(
        "--timeout-factor",
        type=float,
        default=Limits.factor,
        metavar="K",
        help="a mutant's tests (and check) may take K times the unmutated run's time plus the "
        f"margin (default {Limits.factor:g})",
    )
    p.add_argument(
        "--timeout-margin",
        type=float,
        default=Limits.margin_s,
        metavar="SECONDS",
        help=f"added to each time limit (default {Limits.margin_s:g})",
    )
    args = p.parse_args(argv)
    if sum((bool(args.files), args.templates, args.toolkit)) > 1:
        print("mutate: give one of FILE, --templates and --toolkit", file=sys.stderr)
        return 2

    with ExitStack() as stack:  # the templates' rendered folder lives as long as the campaign
        return _campaign(args, stack)


def _campaign(args: argparse.Namespace, stack: ExitStack) -> int:
    if args.templates:
        mutants = [m for m in templates.TEMPLATES if _selected(m.id, args.only)]
        mutations = [templates.mutation(m) for m in mutants]
        root = None  # rendered below, once the selection is known
    elif args.files:
        missing = [str(f) for f in args.files if not f.is_file()]
        if missing:
            print(f"mutate: no such file: {', '.join(missing)}", file=sys.stderr)
            return 2
        if not args.tests:
            print(
                "mutate: give the tests of FILE with --tests (a mutant nothing runs against survives)",
                file=sys.stderr,
            )
            return 2
        root = _root(args.files, args.tests)
        tests = tuple(_relative(t, root) for t in args.tests)  # the runner works in the copy of root
        mutations = []
        for f in args.files:
            check = tuple(args.check) if args.check is not None else (str(f.resolve().relative_to(root)),)
            mutations += generate(f, root, tests=tests, check=check or None, races=args.races)
    else:
        root = repo_root(Path(__file__))
        mutations = list(TOOLKIT if args.toolkit else SHIPPED)
    mutations = [m for m in mutations if _selected(m.id, args.only)]
    if not mutations:
        print("mutate: no mutants", file=sys.stderr)
        return 2
    if args.list:
        for m in mutations:
            print(f"{m.id:<45} {m.file}: {m.why}")
        return 0
    if args.templates:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tpu-kernels-templates-")))
        root = templates.render(folder, templates.variants(tuple(mutants)))

    limits = Limits(args.timeout_factor, args.timeout_margin)
    print(
        f"{len(mutations)} mutants of {root}, each in a scratch copy; check for TPU {args.chip}; "
        f"each run may take {limits.factor:g} x its unmutated run + {limits.margin_s:g} s",
        flush=True,
    )
    start = time.perf_counter()
    outcomes = run_mutants(
        mutations, root, chip=args.chip, echo=_echo, limits=limits, echo_baseline=_echo_baseline
    )
    return _summary(outcomes, time.perf_counter() - start, args.target)


def _selected(id: str, globs: list[str] | None) -> bool:
    return not globs or any(fnmatch.fnmatch(id, g) for g in globs)


def _echo_baseline(b: Baseline) -> None:
    status = "passed" if b.passed else f"DID NOT PASS ({b.step.detail[:100]})"
    print(f"  baseline: {b.describe()}: {status} in {b.step.seconds:.1f} s", flush=True)


def _echo(o: Outcome) -> None:
    status = {"caught": f"caught by {o.caught_by}", "survived": "SURVIVED"}.get(o.verdict, "undetermined")
    print(f"  {o.mutation.id:<45} {status:<17} {o.seconds:6.1f} s  {o.detail[:120]}", flush=True)


def _summary(outcomes: list[Outcome], seconds: float, target: float) -> int:
    undetermined = [o for o in outcomes if o.undetermined]
    determined = [o for o in outcomes if not o.undetermined]
    caught = sum(o.caught for o in determined)
    score = caught / len(determined) if determined else 0.0
    print(
        f"score: {caught} of {len(determined)} caught ({score:.0%}); {len(undetermined)} undetermined, "
        f"left out of the score; {len(outcomes)} mutants in {seconds:.0f} s"
    )
    if undetermined:
        print("undetermined (the run said nothing about the mutant):")
        for o in undetermined:
            print(f"  {o.mutation.id}: {o.detail[:200]}")
    survivors = [o for o in determined if not o.caught]
    if survivors:
        print("survivors (tests and check missed these bugs):")
        for o in survivors:
            print(f"  {o.mutation.id}: {o.mutation.why} ({o.mutation.file})")
    return 0 if determined and score >= target else 1


if __name__ == "__main__":
    sys.exit(main())
