"""The `tpu-kernels` command."""

from __future__ import annotations

import argparse
import glob
import os
import sys


def _no_torch_tpu_autoload_without_a_tpu() -> None:
    """torch auto-loads torch_tpu (when installed) at `import torch`: seconds of start-up, a
    tcmalloc warning and libtpu log lines, for nothing on a machine without a TPU. The command
    runs before torch is imported (`import tpu_kernels` is lazy), so it can turn that off;
    a TPU machine (a /dev/accel* or /dev/vfio device) and an explicit setting are left alone."""
    if "torch" in sys.modules or "TORCH_DEVICE_BACKEND_AUTOLOAD" in os.environ:
        return
    if not glob.glob("/dev/accel*") and not glob.glob("/dev/vfio/[0-9]*"):
        os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"


def main(argv: list[str] | None = None) -> int:
    _no_torch_tpu_autoload_without_a_tpu()
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
