"""Subcommands of `tpu-kernels`: one module each, with `add_parser(subparsers)`."""

from tpu_kernels.commands import bench, cache, check, compare, new, tune

ALL = [bench, compare, check, new, tune, cache]
