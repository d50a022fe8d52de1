"""Checks of command-line arguments, done before any work: each returns the one-line message
(naming the option and the fix) or None."""

from __future__ import annotations

import re
from pathlib import Path


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
