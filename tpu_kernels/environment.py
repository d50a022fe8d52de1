"""What this process runs on: package versions, devices, the git commit. For reports."""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import subprocess

PACKAGES = ("tpu-kernels", "torch", "jax", "jaxlib", "helion", "tokamax", "torch-tpu", "libtpu", "numpy")


def versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def git_commit(path: str | None = None) -> str | None:
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=path or os.getcwd(),
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def snapshot() -> dict:
    """Environment metadata for a benchmark report."""
    return {
        "time": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        # the machine's load when the run began (1, 5 and 15 minutes): timings on a busy
        # machine read slower, so the generated docs state it beside the figures
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "packages": versions(),
        "git_commit": git_commit(),
    }
