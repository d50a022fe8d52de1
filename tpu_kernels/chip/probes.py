"""What the chip probes under bench/ (bench/chip_*_probe.py) share with the runner: their command
line, Pallas' CPU interpreter for a run without a TPU, and their output as JSON lines (printed,
and appended to a file that a long run keeps as it goes). Torch-free, like the rest of
tpu_kernels.chip."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from collections.abc import Callable, Iterator
from typing import Any


def use_interpreter() -> None:
    """Pallas' fast CPU interpreter for every pallas_call traced from here on: the config
    tpu_kernels' own CPU path sets per call (runtime/devices/jax_exec.py)."""
    from tpu_kernels import _compat

    _compat.get("jax_config").pallas_tpu_interpret_mode_context_manager.set_local(True)


def arguments(doc: str, out_name: str, sections: dict | None = None) -> argparse.ArgumentParser:
    """A probe's parser: --out (default $OUT/`out_name`), --quick, --interpret, and --only where
    it has `sections`."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), out_name))
    if sections:
        ap.add_argument("--only", default=",".join(sections), help="comma-separated sections")
    ap.add_argument("--quick", action="store_true", help="small shapes")
    ap.add_argument("--interpret", action="store_true", help="no TPU: Pallas' CPU interpreter")
    return ap


@contextlib.contextmanager
def lines(path: str, *, shown: int | None = None) -> Iterator[Callable[[dict[str, Any]], None]]:
    """write(row): `row` as a JSON line appended to `path` (flushed: a run cut short keeps its
    rows) and printed (its first `shown` characters, where given)."""
    with open(path, "a") as log:

        def write(row: dict[str, Any]) -> None:
            text = json.dumps(row, default=str)
            print(text if shown is None else text[:shown], flush=True)
            log.write(text + "\n")
            log.flush()

        yield write


__all__ = ["arguments", "lines", "use_interpreter"]
