"""Shared by the scripts that measure in fresh processes (startup, varlen, generate,
interpret_memory): each runs itself again with `--child ...` and reads the figures the
child prints as JSON on its last line. Standard library only: the children time their own
imports (startup.py) and memory (interpret_memory.py), so this module must not load torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def run_child(script: str, args: list[str], *, what: str, cache_dir: str, timeout: float) -> dict:
    """`python script *args` in a fresh process on this checkout's tpu_kernels, on CPU JAX
    and without torch's device autoload unless the caller's environment says otherwise;
    `cache_dir` is its TPU_KERNELS_CACHE_DIR ("off": every executable is built)."""
    env = {
        **os.environ,
        "TPU_KERNELS_CACHE_DIR": cache_dir,
        "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu"),
        "TORCH_DEVICE_BACKEND_AUTOLOAD": os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD", "0"),
        "PYTHONPATH": os.pathsep.join(
            [str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]
        ),
    }
    out = subprocess.run(
        [sys.executable, script, *args], env=env, capture_output=True, text=True, timeout=timeout
    )
    if out.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def finish(lines: list[str], figures: dict, json_path: Path | None) -> int:
    """Print the report's lines, write the raw figures to --json's path if given; main()'s exit code."""
    for line in lines:
        print(line)
    if json_path:
        json_path.write_text(json.dumps(figures, indent=2))
    return 0
