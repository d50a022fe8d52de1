"""The TPU suite: tpu_kernels' torch side on `torch.device("tpu")`, through torch_tpu, on a chip.

Every test here is marked `tpu` and skips where torch_tpu reports no TPU device (CI, a
laptop). On a TPU machine (docs/devices.md, "The TPU suite"):

    JAX_PLATFORMS=tpu,cpu TPU_KERNELS_TPU_RECORD=bench/reports/tpu_suite_v5e.json \\
        python -m pytest tests/tpu -p no:xdist

runs it in one process (one program at a time may hold the chip) and writes its record:
versions, commit, device, and each test's outcome, duration and figures (`figures`). The CPU
suite checks that committed record (tests/test_tpu_record.py), as it checks the JAX-half one.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import torch

RECORD_ENV = "TPU_KERNELS_TPU_RECORD"
MERGE_ENV = "TPU_KERNELS_TPU_RECORD_MERGE"  # other runs' records (os.pathsep between), whose tests this one's takes in
PROBE_ENV = "TPU_KERNELS_TPU_PROBE"
ROOT = Path(__file__).resolve().parents[2]
_FIGURES: dict[str, dict[str, Any]] = {}
_OUTCOMES: dict[str, dict[str, Any]] = {}


def tpu_available() -> bool:
    """Whether torch sees a TPU device (torch_tpu loaded and a chip present). With
    TPU_KERNELS_TPU_PROBE=files: whether the machine shows one and torch_tpu is installed,
    without loading torch_tpu, which opens the chip; scripts/tpu-suite runs the tests whose
    child processes use the chip that way (libtpu lets one process at a time hold it)."""
    import importlib.util

    from tpu_kernels import startup

    if not startup.has_tpu_device():  # no /dev/accel*: not even torch_tpu's import is needed
        return False
    if os.environ.get(PROBE_ENV) == "files":
        return importlib.util.find_spec("torch_tpu") is not None
    try:
        from tpu_kernels.runtime.devices import tpu as tpu_device

        tpu_device.torch_tpu_pallas()
    except Exception:
        return False
    acc = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
    return acc is not None and acc.type == "tpu"


_HAS_TPU: bool | None = None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    global _HAS_TPU
    here = Path(__file__).parent
    ours = [item for item in items if Path(str(item.fspath)).is_relative_to(here)]
    if not ours:
        return
    if _HAS_TPU is None:
        _HAS_TPU = tpu_available()
    skip = pytest.mark.skip(reason="no TPU device: torch_tpu reports none (the TPU suite runs on a chip)")
    for item in ours:
        item.add_marker(pytest.mark.tpu)
        if not _HAS_TPU:
            item.add_marker(skip)


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> dict[str, Any]:
    """A dict a test fills with what it measured (errors, microseconds); it lands in the record."""
    out: dict[str, Any] = {}
    _FIGURES[request.node.nodeid] = out
    return out


@pytest.fixture
def tpu() -> torch.device:
    return torch.device("tpu")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if not Path(str(item.fspath)).is_relative_to(Path(__file__).parent):
        return
    entry = _OUTCOMES.setdefault(item.nodeid, {"outcome": "passed", "duration_s": 0.0})
    entry["duration_s"] = round(entry["duration_s"] + report.duration, 3)
    if report.failed:
        entry["outcome"] = "failed"
        entry["error"] = str(report.longrepr)[-2000:]
    elif report.skipped and entry["outcome"] == "passed":
        entry["outcome"] = "skipped"
        entry["reason"] = str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else ""


def _versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for name in ("torch", "torch_tpu", "jax", "jaxlib", "libtpu", "helion", "transformers"):
        try:
            out[name] = md.version(name.replace("_", "-"))
        except md.PackageNotFoundError:
            try:
                out[name] = md.version(name)
            except md.PackageNotFoundError:
                continue
    return out


def _commit() -> dict[str, Any]:
    """The checkout's commit; on a device machine, which gets a copy of the tree without its
    git history, the one TPU_KERNELS_COMMIT names (the caller runs a committed, clean tree)."""
    if os.environ.get("TPU_KERNELS_COMMIT"):
        return {"commit": os.environ["TPU_KERNELS_COMMIT"], "dirty": False}

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    return {
        "commit": git("rev-parse", "HEAD"),
        "dirty": bool(git("status", "--porcelain", "--", "tpu_kernels", "tests")),
    }


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    path = os.environ.get(RECORD_ENV)
    if not path or not _OUTCOMES:
        return
    device = ""
    if _HAS_TPU and hasattr(torch, "tpu"):
        device = torch.tpu.get_device_name()  # type: ignore[attr-defined]
    tests = {k: {**v, "figures": _FIGURES.get(k, {})} for k, v in _OUTCOMES.items()}
    for merge in filter(None, os.environ.get(MERGE_ENV, "").split(os.pathsep)):
        # scripts/tpu-suite's other runs: the tests whose children hold the chip, those that may abort
        other = json.loads(Path(merge).read_text())
        tests.update({k: v for k, v in other["tests"].items() if k not in tests})
        device = device or other.get("device", "")
    tests = dict(sorted(tests.items()))
    counts = {o: sum(1 for t in tests.values() if t["outcome"] == o) for o in ("passed", "failed", "skipped")}
    record = {
        "kind": "tpu_suite",
        "date": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "device": device,
        "versions": _versions(),
        **_commit(),
        "counts": counts,
        "tests": tests,
    }
    Path(path).write_text(json.dumps(record, indent=1, sort_keys=False) + "\n")
