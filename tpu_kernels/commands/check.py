"""`tpu-kernels check`: lower every op for the TPU (no TPU needed) and report errors and VMEM use.

For each op defined by the given modules (default: tpu_kernels.kernels, the
shipped kernels), every example call (`examples=` on @tpu_kernel; derived for
backward ops) is exported with `jax.export` for platform "tpu". Reported per
op: lowered or not, the Mosaic/Pallas error in plain words when not, and the
estimated VMEM per grid step of each Pallas kernel; a grid that leaves output
elements unwritten, or a block entirely outside its array, fails. With --races, each call
also runs, scaled down, in JAX's TPU-semantics interpreter with its race
detector. With --bounds, each call of a kernel whose index maps read scalar
prefetch runs at its own shapes: its block indices are checked against the
arrays, then the TPU interpreter checks every access. With --sharding, each op's
DTensor rule is also derived from its kernel and simulated on 2 and 3 shards
(docs/distributed.md). Exit status: 0 all ops lowered, 1 some op failed, 2 no ops found.

See docs/tpu-lowering-check.md.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import TextIO

from tpu_kernels.commands._args import file_problem, regex_problem, subcommand

EXIT_FAILED = 1
EXIT_NOTHING = 2
RAW_CHARS = 400  # of each raw error, without --verbose


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = subcommand(sub, "check", __doc__)
    p.add_argument(
        "modules",
        nargs="*",
        metavar="MODULE",
        help="module names, .py files or package folders whose import registers ops "
        "(default: tpu_kernels.kernels)",
    )
    p.add_argument(
        "--races",
        action="store_true",
        help="also run each example, scaled down, in the TPU interpreter with race detection (slow)",
    )
    p.add_argument(
        "--bounds",
        action="store_true",
        help="also run each example whose kernels read scalar prefetch and fail a block index "
        "outside its array (index values from the example; slow)",
    )
    p.add_argument(
        "--chip",
        default=None,
        help="TPU generation to lower for and compare VMEM with: v5e, v5p, v6e, 7x, ... (default v6e)",
    )
    p.add_argument(
        "--sharding",
        action="store_true",
        help="also derive each op's DTensor sharding rule from its kernel and simulate its rule on 2 and 3 shards",
    )
    p.add_argument("--filter", help="only ops whose name matches this regular expression")
    p.add_argument("--json", type=Path, metavar="PATH", help="also write the report as JSON")
    p.add_argument(
        "-v", "--verbose", action="store_true", help="every example call, every VMEM buffer, full raw errors"
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from tpu_kernels.lowering_check import DEFAULT_CHIP, DEFAULT_MODULE, check_op, chip, ops_of

    out = sys.stdout
    modules = args.modules or [DEFAULT_MODULE]
    problem = regex_problem("--filter", args.filter) or file_problem("--json", args.json)
    if problem:
        print(f"tpu-kernels check: {problem}", file=sys.stderr)
        return EXIT_NOTHING
    try:
        target = chip(args.chip or DEFAULT_CHIP)
    except ValueError as e:
        print(f"tpu-kernels check: {e}", file=sys.stderr)
        return EXIT_NOTHING
    try:
        ops = ops_of(modules)
    except Exception as e:  # an import error in the user's module: say which, keep the cause
        print(
            f"tpu-kernels check: could not import {', '.join(modules)}: {type(e).__name__}: {e}",
            file=sys.stderr,
        )
        return EXIT_NOTHING
    except SystemExit as e:  # a script's sys.exit() at import would end the check silently
        print(
            f"tpu-kernels check: importing {', '.join(modules)} called sys.exit({e.code!r}); the check "
            'imports each module, so keep script code under `if __name__ == "__main__":`',
            file=sys.stderr,
        )
        return EXIT_NOTHING
    if args.filter:
        ops = [op for op in ops if re.search(args.filter, op.name)]
    if not ops:
        print(f"tpu-kernels check: no ops found in {', '.join(modules)}", file=sys.stderr)
        return EXIT_NOTHING
    from tpu_kernels.lowering_check.vmem import fmt_bytes

    print(
        f"TPU lowering check of {len(ops)} ops from {', '.join(modules)}; VMEM compared with a TPU "
        f"{target.name} core ({fmt_bytes(target.vmem_bytes)})"
        + (", races checked" if args.races else "")
        + (", bounds checked" if args.bounds else ""),
        file=out,
    )
    reports = []
    width = max(len(op.name) for op in ops)
    for op in ops:
        report = check_op(op, chip_name=target.name, races=args.races, bounds=args.bounds)
        reports.append(report)
        _print_report(report, width, args.verbose, out)
        out.flush()
    counts = {s: sum(r.status == s for r in reports) for s in ("ok", "failed", "skipped")}
    print(
        f"{len(reports)} ops: {counts['ok']} ok, {counts['failed']} failed, {counts['skipped']} skipped",
        file=out,
    )
    sharded = []
    if args.sharding:
        from tpu_kernels.lowering_check.sharding import run_all

        sharded = run_all(ops, out)
        wrong = sum(r.status == "failed" for r in sharded)
        print(
            f"sharding rules: {len(sharded) - wrong} of {len(sharded)} ops without a wrong strategy", file=out
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "schema": "tpu_kernels.check/1",
            "modules": modules,
            "chip": {"name": target.name, "vmem_bytes": target.vmem_bytes},
            "races": args.races,
            "bounds": args.bounds,
            "ops": [r.to_json() for r in reports],
        }
        if args.sharding:
            payload["sharding"] = [r.to_json() for r in sharded]
        args.json.write_text(json.dumps(payload, indent=2, default=str))
    return EXIT_FAILED if counts["failed"] or any(r.status == "failed" for r in sharded) else 0


def _summary(report) -> str:
    from tpu_kernels.lowering_check.vmem import fmt_bytes

    if report.status == "skipped":
        return report.reason
    n = len(report.examples)
    lowered = sum(e.lowered for e in report.examples)
    text = f"{lowered} of {n} calls lowered"
    # Say what failed in the line itself: "1 of 1 calls lowered" alone read as a success on a
    # FAILED line when the failure came after lowering (a dtype, VMEM or coverage problem).
    not_lowered = [e for e in report.examples if not e.lowered]
    if not_lowered:
        text += f" ({'' if not lowered else f'{len(not_lowered)} not: '}{_kinds(not_lowered)})"
    failed_after = [e for e in report.examples if e.lowered and e.problems]
    if failed_after:
        text += f", {len(failed_after)} of them failed after lowering ({_kinds(failed_after)})"
    sizes = [e.vmem_bytes for e in report.examples if e.vmem_bytes is not None]
    if sizes:
        text += f", VMEM per grid step up to {fmt_bytes(max(sizes))}"
    elif lowered and not any(e.mosaic for e in report.examples):
        text += ", no Pallas kernel (plain XLA)"
    if any(e.race_call for e in report.examples) and not report.failed:
        text += ", no races"
    if any(e.bounds_call for e in report.examples) and not report.failed:
        text += ", block indices in bounds"
    return text


def _kinds(examples: list) -> str:
    """The kinds of problem of these calls, each once, in order of first appearance: "dtype, vmem"."""
    kinds = dict.fromkeys(p.kind for e in examples for p in e.problems)
    return ", ".join(kinds) or "no error recorded"


def _print_report(report, width: int, verbose: bool, out: TextIO) -> None:
    from tpu_kernels.lowering_check.vmem import fmt_bytes

    label = {"ok": "ok", "failed": "FAILED", "skipped": "skipped"}[report.status]
    print(f"{label:<8} {report.op:<{width}}  {_summary(report)}", file=out)
    pad = " " * 9
    for e in report.examples:
        if not (verbose or e.problems or e.warnings):
            continue
        print(f"{pad}{e.call}", file=out)
        if verbose:
            for i, k in enumerate(e.kernels):
                grid = "x".join(map(str, k.grid)) or "1"
                parts = f"{fmt_bytes(k.bytes)} buffers + {fmt_bytes(k.temporaries)} body temporaries"
                fit = f"; {e.verdicts[i].describe()}" if i < len(e.verdicts) else ""
                print(
                    f"{pad}  kernel {k.kernel}, grid {grid}: {fmt_bytes(k.estimate)} of VMEM per step ({parts}){fit}",
                    file=out,
                )
                for b in k.buffers:
                    copies = f" x{b.copies}" if b.copies > 1 else ""
                    print(
                        f"{pad}    {b.what:<10} {b.dtype}{list(b.shape)}{copies}: {fmt_bytes(b.bytes)}",
                        file=out,
                    )
        for p in e.problems:
            print(f"{pad}  error ({p.kind}): {p.message}", file=out)
            if p.raw:
                raw = p.raw if verbose else _clip(p.raw)
                print(f"{pad}    raw: " + raw.replace("\n", "\n" + pad + "         "), file=out)
        for w in e.warnings:
            print(f"{pad}  warning: {w}", file=out)


def _clip(text: str) -> str:
    text = text.strip()
    return text if len(text) <= RAW_CHARS else text[:RAW_CHARS] + " ... (-v for all)"
