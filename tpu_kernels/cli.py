"""The `tpu-kernels` command."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="tpu-kernels",
        description="Pallas, JAX and Helion kernels as PyTorch operators: benchmarks, checks, templates.",
    )
    parser.add_argument(
        "--version", action="store_true", help="print the versions of tpu_kernels and its stack"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    from tpu_kernels import commands

    for module in commands.ALL:
        module.add_parser(sub)
    args = parser.parse_args(argv)
    if args.version:
        from tpu_kernels.environment import versions

        for name, version in versions().items():
            print(f"{name} {version}")
        return 0
    if args.command is None:
        parser.print_help()
        return 2
    return int(args.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
