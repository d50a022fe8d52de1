"""Each subcommand is described by its module's docstring alone (`commands._args.subcommand`):
its summary line in `tpu-kernels --help`, all of it, as written, under its own --help."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from tpu_kernels import commands
from tpu_kernels.cli import main
from tpu_kernels.commands._args import subcommand

ROOT = Path(__file__).resolve().parents[1]


def _help(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("module", commands.ALL, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_help_is_the_command_docstring_unwrapped_with_an_existing_docs_page(module, capsys):
    name = module.__name__.rsplit(".", 1)[-1]
    out = _help([name, "--help"], capsys)
    # line for line: the docstring's tables and lists (cache's actions) keep their layout
    assert module.__doc__.strip() in out
    assert re.search(r"\n\nSee docs/", out), "the docs page in a paragraph of its own"
    for page in re.findall(r"docs/[\w.-]+\.md", out):
        assert (ROOT / page).is_file(), page
    summary = module.__doc__.split("\n")[0].removeprefix(f"`tpu-kernels {name}`: ").rstrip(".")
    listing = " ".join(_help(["--help"], capsys).split())  # argparse wraps the command list
    assert f"{name} {summary}" in listing


def test_a_command_docstring_without_its_summary_line_is_refused():
    sub = argparse.ArgumentParser().add_subparsers()
    with pytest.raises(ValueError, match=r"tpu-kernels nope: .*must start with '`tpu-kernels nope`: '"):
        subcommand(sub, "nope", "`tpu-kernels other`: does something.")
    with pytest.raises(ValueError, match="a one-line summary"):
        subcommand(sub, "nope", "`tpu-kernels nope`: ")
    p = subcommand(sub, "nope", "\n`tpu-kernels nope`: does something.\n\nMore.\n")
    assert p.description == "`tpu-kernels nope`: does something.\n\nMore."
