"""What the commands share about their arguments: the subcommand's parser (`subcommand`), and
checks done before any work, each returning the one-line message (naming the option and the
fix) or None."""

from __future__ import annotations

import argparse
import re
from pathlib import Path


def subcommand(sub: argparse._SubParsersAction, name: str, doc: str) -> argparse.ArgumentParser:
    """The parser of `tpu-kernels NAME`, described by its module's docstring `doc` alone: the
    first line, "`tpu-kernels NAME`: what it does.", is its line in `tpu-kernels --help` (and
    the CLI reference's summary); the whole docstring, as written (its tables and lists are
    not re-wrapped), is its own --help."""
    return sub.add_parser(
        name,
        help=summary(name, doc),
        description=doc.strip(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def summary(name: str, doc: str) -> str:
    """The line of `tpu-kernels NAME` in `tpu-kernels --help`: its module docstring's first
    line, "`tpu-kernels NAME`: what it does.", without the lead and the full stop."""
    lead = f"`tpu-kernels {name}`: "
    first = doc.strip().split("\n", 1)[0]
    if not first.startswith(lead) or first == lead:
        raise ValueError(
            f"tpu-kernels {name}: the command module's docstring must start with "
            f"{lead!r} and a one-line summary; it starts with {first!r}"
        )
    return first.removeprefix(lead).rstrip(".")


def regex_problem(option: str, pattern: str | None) -> str | None:
    """Why `pattern` (given as `option`) is not a regular expression, or None."""
    if pattern is None:
        return None
    try:
        re.compile(pattern)
    except re.error as e:
        return f"{option} {pattern!r} is not a regular expression ({e}); escape special characters with a backslash"
    return None


def folder_problem(option: str, path: Path | None) -> str | None:
    """Why `path` cannot be (or be created as) a folder, or None."""
    if path is None:
        return None
    for p in (path, *path.parents):
        if p.exists():
            if p.is_dir():
                return None
            where = "is" if p == path else f"is inside {p}, which is"
            return f"{option} {path}: {where} a file, not a folder; give a folder (it is created if missing)"
    return None


def file_problem(option: str, path: Path | None) -> str | None:
    """Why a file cannot be written at `path`, or None."""
    if path is None:
        return None
    if path.is_dir():
        return f"{option} {path}: is a folder; give a file path, e.g. {path / 'report.json'}"
    for p in path.parents:
        if p.exists():
            if p.is_dir():
                return None
            return f"{option} {path}: is inside {p}, which is a file, not a folder; give another path"
    return None
