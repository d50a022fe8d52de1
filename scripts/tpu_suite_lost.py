"""A TPU-suite record for a pytest process that ended without writing one (a C++ abort takes the
process down before pytest's session end): each of its tests failed, with the process's exit
status and the end of its log. scripts/tpu-suite runs the tests that may abort in processes of
their own and merges what they recorded, or this, into the main record.

    python scripts/tpu_suite_lost.py RECORD STATUS LOG FILE...
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path


def collected(files: list[str]) -> list[str]:
    """The node ids pytest collects from `files`, without loading torch_tpu or JAX's TPU backend."""
    env = {
        **os.environ,
        "TORCH_DEVICE_BACKEND_AUTOLOAD": "0",
        "JAX_PLATFORMS": "cpu",
        "TPU_KERNELS_TPU_PROBE": "files",
    }
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    return [line.strip() for line in out.stdout.splitlines() if "::" in line]


def main(argv: list[str]) -> int:
    record, status, log, *files = argv
    tail = Path(log).read_text(errors="replace")[-1500:] if Path(log).is_file() else "(no log)"
    error = (
        f"the pytest process ended without writing its record (exit status {status}); its log ends:\n{tail}"
    )
    tests = {
        nodeid: {"outcome": "failed", "duration_s": 0.0, "error": error, "figures": {}}
        for nodeid in collected(files)
    }
    Path(record).write_text(
        json.dumps(
            {
                "kind": "tpu_suite",
                "date": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
                "counts": {"passed": 0, "failed": len(tests), "skipped": 0},
                "tests": tests,
            },
            indent=1,
        )
        + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
