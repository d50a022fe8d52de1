"""Subcommands of `tpu-kernels`: one module each, with `add_parser(subparsers)`."""

ALL: list = []
