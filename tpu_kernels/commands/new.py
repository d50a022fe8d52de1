"""`tpu-kernels new`: scaffold a kernel (package, tests, benchmark) from a template.

Writes DIR/NAME/ (the kernel package: kernel, reference, shapes, registration),
DIR/tests/test_NAME.py and DIR/bench/NAME.py, which pass and run as generated.
Refuses to overwrite existing files.

See docs/templates.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tpu_kernels.commands._args import folder_problem, subcommand

EXIT_USAGE = 2


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = subcommand(sub, "new", __doc__)
    p.add_argument("name", nargs="?", metavar="NAME", help="the op and package name, e.g. my_softmax")
    p.add_argument("-t", "--template", help="the template (see --list)")
    p.add_argument(
        "--backend",
        default="pallas",
        help="pallas (default) or helion (a Helion kernel; --list shows which templates have one)",
    )
    p.add_argument("--dir", type=Path, default=Path("."), help="where to write (default: the current folder)")
    p.add_argument("--namespace", default="mylib", help="the torch op namespace (default: mylib)")
    p.add_argument("--list", action="store_true", help="list the templates and their backends")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from tpu_kernels import scaffold

    try:
        if args.list:
            for t in scaffold.list_templates().values():
                print(f"{t.name:<18} [{', '.join(t.backends)}]  {t.description}")
            return 0
        if not args.name or not args.template:
            print(
                "tpu-kernels new: give NAME and --template (tpu-kernels new --list shows them)",
                file=sys.stderr,
            )
            return EXIT_USAGE
        problem = folder_problem("--dir", args.dir)
        if problem:
            print(f"tpu-kernels new: {problem}", file=sys.stderr)
            return EXIT_USAGE
        written = scaffold.new(
            args.name, args.template, backend=args.backend, dest=args.dir, namespace=args.namespace
        )
    except scaffold.ScaffoldError as e:
        print(e, file=sys.stderr)
        return EXIT_USAGE
    except OSError as e:  # a folder we may not write to, a full disk
        print(f"tpu-kernels new: cannot write under --dir {args.dir}: {e.strerror or e}", file=sys.stderr)
        return EXIT_USAGE
    print(f"created {args.namespace}::{args.name} from the {args.template} template ({args.backend}):")
    for path in written:
        print(f"  {path}")
    print(
        "next, from that folder:\n"
        f"  python -m pytest tests/test_{args.name}.py      # correctness, gradients, opcheck, compile, TPU lowering\n"
        f"  tpu-kernels check {args.name}                   # TPU lowering and VMEM per grid step\n"
        f"  tpu-kernels bench bench/{args.name}.py --quick   # timings against torch"
    )
    return 0
