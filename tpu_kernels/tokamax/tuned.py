"""Tokamax's autotuning results applied to every `tpu_kernels.tokamax` op.

`tpu_kernels.autotune` hands Tokamax ops to Tokamax's autotuner (`tpu_kernels.autotuner.delegate`)
and saves its results in Tokamax's own JSON format, one file per Tokamax device kind, named
`tokamax.<device kind>.autotuning.json`, in `$TPU_KERNELS_TUNING_DIR` if set, else beside this
module. Each op's JAX body is traced inside every such result (`applied()`), so Tokamax finds
the tuned configs as it finds its own cache's. Files are read once per process (`reload()`
reads again); a file Tokamax cannot read is skipped with a `TuningNote`. Each trace enters
results of its own (parsed from the text read): an `AutotuningResult` keeps its context token
on itself, so one object entered by two threads at once would restore the wrong one.
"""

from __future__ import annotations

import contextlib
import os
import re
import warnings
from collections.abc import Iterator
from pathlib import Path

from tpu_kernels.tunables.lookup import TUNING_DIR_ENV, TuningNote

_HOME = Path(__file__).resolve().parent
_LOADED: list[str] | None = None  # the files' texts


def _name(device_kind: str) -> str:
    return "tokamax." + re.sub(r"[^A-Za-z0-9_.-]+", "_", device_kind) + ".autotuning.json"


def write_path(device_kind: str, directory: str | Path | None = None) -> Path:
    """Where the results for `device_kind` are written."""
    env = os.environ.get(TUNING_DIR_ENV)
    base = Path(directory) if directory is not None else (Path(env).expanduser() if env else _HOME)
    return base / _name(device_kind)


def reload() -> None:
    global _LOADED
    _LOADED = None


def results() -> list[str]:
    """Every readable Tokamax result file's text (the tuning directory's after this folder's:
    entered later, so it takes precedence)."""
    global _LOADED
    if _LOADED is not None:
        return _LOADED
    found: list[str] = []
    dirs = [_HOME]
    env = os.environ.get(TUNING_DIR_ENV)
    if env:
        dirs.append(Path(env).expanduser())
    paths = [p for d in dirs if d.is_dir() for p in sorted(d.glob("tokamax.*.autotuning.json"))]
    if paths:
        import tokamax

        for p in paths:
            try:
                text = p.read_text()
                tokamax.AutotuningResult.loads(text)
                found.append(text)
            except Exception as e:  # noqa: BLE001 - Tokamax's own validation errors vary
                warnings.warn(
                    f"{p}: Tokamax cannot read this autotuning result; running without it ({e})",
                    TuningNote,
                    stacklevel=2,
                )
    _LOADED = found
    return found


@contextlib.contextmanager
def applied() -> Iterator[None]:
    """Trace inside every saved Tokamax result (a no-op when there is none)."""
    found = results()
    if not found:
        yield
        return
    import tokamax

    with contextlib.ExitStack() as stack:
        for text in found:
            stack.enter_context(tokamax.AutotuningResult.loads(text))
        yield
