"""Measure the figures README.md and docs/performance.md show, then regenerate those pages.

    python bench/record.py [NAME ...]      # default: every record; --list names them

Each record is a file in bench/reports/:

  <device>.json   the main job: `tpu-kernels bench` with its defaults, as `bash scripts/bench`
                  runs it on a fresh machine (empty kernel and Inductor caches; on a CPU:
                  cpu.json); its report is also what a run's estimate reads for the points
                  it has no figures of its own for
  startup.json    python bench/startup.py --repeat 2
  varlen.json     python bench/varlen.py --repeat 3
  generate.json   python bench/generate.py --repeat 5
  breakdown.json  python bench/generate.py --breakdown
  overhead.json   python bench/overhead.py (the pieces of a call, and every op against its floor)
  dispatch.json   python bench/dispatch_modes.py (synchronous against asynchronous CPU dispatch)
  tests.json      the test suite as `bash scripts/test` runs it (its serial tests, then the rest
                  on 2 workers): its wall time and pytest's summary; a long run, so never part
                  of the default (name it: `python bench/record.py tests`)

A script's record holds the command, the environment when it began (tpu_kernels.environment:
versions, CPU count, load average, commit), its wall time and the figures its `--json` wrote.
Then `python -m tpu_kernels.docs_tables` rewrites every generated region from the records
(tpu_kernels/docs_perf.py renders them), so a page never shows a figure no record holds.
Run it on a machine as quiet as you can get: the records say what the load was.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
REPORTS = HERE / "reports"

# name -> the script and its arguments (the figures go to the path given with --json)
SCRIPTS: dict[str, list[str]] = {
    "startup": ["bench/startup.py", "--repeat", "2"],
    "varlen": ["bench/varlen.py", "--repeat", "3"],
    "generate": ["bench/generate.py", "--repeat", "5"],
    "breakdown": ["bench/generate.py", "--breakdown"],
    "overhead": ["bench/overhead.py"],
    "dispatch": ["bench/dispatch_modes.py"],
}
MAIN = "main"
TESTS = "tests"
NAMES = (MAIN, *SCRIPTS)  # the default: every record but TESTS
# scripts/test's two pytest runs (kept in step by tests/test_docs.py)
TEST_RUNS = (["-p", "no:xdist", "-m", "serial", "-q"], ["-n", "2", "--dist", "loadfile"])
SUMMARY = re.compile(r"^=*\s*(\d+ [a-z].*?) in [\d.]+s\b", re.M)  # "=== 3 passed, 1 skipped in 2.0s ==="


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu"),
        "TORCH_DEVICE_BACKEND_AUTOLOAD": os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD", "0"),
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }


def record_main() -> Path:
    """The main job's report, as bench/reports/<device type>.json: run with empty kernel and
    Inductor caches, as a fresh machine runs it (a rerun on warm caches skips most compiles)."""
    with tempfile.TemporaryDirectory(prefix="tpu-kernels-record-") as out:
        cold = {"TPU_KERNELS_CACHE_DIR": f"{out}/kernels", "TORCHINDUCTOR_CACHE_DIR": f"{out}/inductor"}
        command = [sys.executable, "-m", "tpu_kernels", "bench", "--out", out]
        subprocess.run(command, cwd=ROOT, env={**_env(), **cold}, check=True)
        report = json.loads((Path(out) / "report.json").read_text())
        target = REPORTS / f"{report['device']['type']}.json"
        shutil.copyfile(Path(out) / "report.json", target)
    return target


def record_script(name: str) -> Path:
    """bench/reports/<name>.json: the script's figures, its command and the environment."""
    from tpu_kernels import environment

    script = SCRIPTS[name]
    started = environment.snapshot()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tpu-kernels-record-") as d:
        figures = Path(d) / "figures.json"
        subprocess.run([sys.executable, *script, "--json", str(figures)], cwd=ROOT, env=_env(), check=True)
        data = json.loads(figures.read_text())
    target = REPORTS / f"{name}.json"
    record = {
        "command": "python " + " ".join(script),
        "environment": started,
        "wall_s": time.monotonic() - t0,
        "figures": data,
    }
    target.write_text(json.dumps(record, indent=1) + "\n")
    return target


def record_tests() -> Path:
    """bench/reports/tests.json: scripts/test's runs, their wall time and pytest's summaries."""
    from tpu_kernels import environment

    started = environment.snapshot()
    t0 = time.monotonic()
    summaries = []
    for args in TEST_RUNS:
        run = subprocess.run(
            [sys.executable, "-m", "pytest", *args], cwd=ROOT, env=_env(), capture_output=True, text=True
        )
        sys.stderr.write(run.stdout[-2000:])
        found = SUMMARY.findall(run.stdout)
        if not found:
            raise SystemExit(
                f"record.py: no pytest summary in `pytest {' '.join(args)}` (exit {run.returncode})"
            )
        summaries.append(found[-1])
    record = {
        "command": "bash scripts/test",
        "environment": started,
        "wall_s": time.monotonic() - t0,
        "figures": {"summary": "; ".join(summaries)},
    }
    target = REPORTS / f"{TESTS}.json"
    target.write_text(json.dumps(record, indent=1) + "\n")
    return target


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("names", nargs="*", metavar="NAME", help=f"from {', '.join(NAMES)} (default), {TESTS}")
    p.add_argument("--list", action="store_true", help="name the records and exit")
    args = p.parse_args(argv)
    if args.list:
        print("\n".join((*NAMES, TESTS)))
        return 0
    unknown = sorted(set(args.names) - {*NAMES, TESTS})
    if unknown:
        p.error(f"unknown records {unknown}; choose from {', '.join((*NAMES, TESTS))}")
    REPORTS.mkdir(exist_ok=True)
    for name in args.names or NAMES:
        print(f"recording {name} ...", file=sys.stderr, flush=True)
        path = record_main() if name == MAIN else record_tests() if name == TESTS else record_script(name)
        print(f"wrote {path.relative_to(ROOT)}", file=sys.stderr)
    sys.path.insert(0, str(ROOT))
    from tpu_kernels import docs_tables

    return docs_tables.main([], root=ROOT)


if __name__ == "__main__":
    sys.exit(main())
