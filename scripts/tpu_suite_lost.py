"""A TPU-suite record for a pytest process whose own record is missing: it ended without writing
one (a C++ abort takes the process down before pytest's session end), or the record did not come
back from the chip's machine. What the process's log shows is kept: pytest's `-q` progress
characters, in collection order, give the outcome of each test they reach ('.' passed, 's'
skipped, 'F' failed); a test they do not reach failed with the process. Durations and figures
are lost (null), and the record says so in `lost` (why, and the log it was read from).

scripts/tpu-suite runs the tests that may abort in processes of their own and merges what they
recorded, or this, into the main record; it writes this for the main process too when that
process wrote nothing. Records named by TPU_KERNELS_TPU_RECORD_MERGE (the same run's other
processes) are merged in as tests/tpu/conftest.py merges them, and give the device, versions and
commit this process could not write.

    python scripts/tpu_suite_lost.py [--why TEXT] RECORD STATUS LOG PYTEST_ARG...
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

MERGE_ENV = "TPU_KERNELS_TPU_RECORD_MERGE"
PROGRESS = {".": "passed", "s": "skipped", "F": "failed"}
# a progress line; the last may lack its percentage when the process died mid-line
_PROGRESS_LINE = re.compile(r"^([.sFExX]+)[ \t]*(?:\[\s*\d+%\])?[ \t]*$", re.M)
_SKIPPED_LINE = re.compile(r"^SKIPPED \[\d+\] ([^:]+):\d+: (.*)$", re.M)


def collected(pytest_args: list[str]) -> list[str]:
    """The node ids pytest collects, in order, without loading torch_tpu or JAX's TPU backend."""
    env = {
        **os.environ,
        "TORCH_DEVICE_BACKEND_AUTOLOAD": "0",
        "JAX_PLATFORMS": "cpu",
        "TPU_KERNELS_TPU_PROBE": "files",
    }
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *pytest_args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    return [line.strip() for line in out.stdout.splitlines() if "::" in line]


def outcomes(log: str, ids: list[str]) -> list[str | None]:
    """Each collected test's outcome as the log's progress characters give it, None past their
    end. All None when the characters cannot be matched to the tests one for one (more of them
    than tests, or a character it has no outcome for: an 'E', which pytest adds beside a test's
    own, or an xfail's 'x' or 'X')."""
    chars = "".join(_PROGRESS_LINE.findall(log))
    if len(chars) > len(ids) or set(chars) - set(PROGRESS):
        return [None] * len(ids)
    return [PROGRESS[c] for c in chars] + [None] * (len(ids) - len(chars))


def skip_reasons(log: str) -> dict[str, str]:
    """pytest's `-rs` summary: the reason given for the skips in each file."""
    return {path: reason for path, reason in _SKIPPED_LINE.findall(log)}


def lost_record(status: str, log_path: str, ids: list[str], why: str = "") -> dict:
    log = Path(log_path).read_text(errors="replace") if Path(log_path).is_file() else ""
    tail = log[-1500:] or "(no log)"
    error = (
        f"the pytest process ended without writing its record (exit status {status}); its log ends:\n{tail}"
    )
    reasons = skip_reasons(log)
    tests = {}
    for nodeid, outcome in zip(ids, outcomes(log, ids)):
        entry: dict = {"outcome": outcome or "failed", "duration_s": None, "figures": None}
        if outcome is None:
            entry["error"] = error
        elif outcome == "failed":
            entry["error"] = f"failed on the chip; the record was lost, see {Path(log_path).name}"
        elif outcome == "skipped":
            entry["reason"] = reasons.get(nodeid.split("::")[0], "")
        tests[nodeid] = entry
    return {
        "lost": {
            "why": why or f"the pytest process's own record is missing (exit status {status})",
            "log": Path(log_path).name,
            "tests": len(tests),
        },
        "tests": tests,
    }


def merged(record: dict, merge: str, date: str) -> dict:
    """`record` with the tests, device, versions and commit of the same run's other records."""
    tests = dict(record["tests"])
    out = {"kind": "tpu_suite", "date": date, "device": ""}
    for path in filter(None, merge.split(os.pathsep)):
        if not Path(path).is_file():
            continue
        other = json.loads(Path(path).read_text())
        tests.update({k: v for k, v in other["tests"].items() if k not in tests})
        out["device"] = out["device"] or other.get("device", "")
        for key in ("versions", "commit", "dirty"):
            if key in other:
                out.setdefault(key, other[key])
    tests = dict(sorted(tests.items()))
    counts = {o: sum(1 for t in tests.values() if t["outcome"] == o) for o in ("passed", "failed", "skipped")}
    return {**out, "lost": record["lost"], "counts": counts, "tests": tests}


def main(argv: list[str]) -> int:
    why = ""
    if argv[:1] == ["--why"]:
        why, argv = argv[1], argv[2:]
    record, status, log, *pytest_args = argv
    lost = lost_record(status, log, collected(pytest_args), why)
    # when the process ended: its log's last write (now, where there is no log)
    when = Path(log).stat().st_mtime if Path(log).is_file() else time.time()
    out = merged(lost, os.environ.get(MERGE_ENV, ""), time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(when)))
    Path(record).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
