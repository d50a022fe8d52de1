"""scripts/tpu_suite_lost.py: the TPU-suite record it writes for a pytest process whose own record
is missing, read from that process's `-q` log."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("tpu_suite_lost", ROOT / "scripts" / "tpu_suite_lost.py")
lost = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lost)

IDS = [f"tests/tpu/test_a.py::test_{i}" for i in range(5)]


def test_each_progress_character_gives_its_tests_outcome_in_collection_order():
    log = "warnings first\n..sF.                                                     [100%]\n"
    assert lost.outcomes(log, IDS) == ["passed", "passed", "skipped", "failed", "passed"]


def test_progress_over_several_lines_and_a_last_line_cut_off_by_an_abort():
    log = "...                [ 60%]\n.\nFatal Python error: Aborted\n"
    assert lost.outcomes(log, IDS) == ["passed", "passed", "passed", "passed", None]


def test_progress_that_cannot_be_matched_one_for_one_gives_no_outcome():
    assert lost.outcomes("......   [100%]\n", IDS) == [None] * 5  # more characters than tests
    assert lost.outcomes("..E..   [100%]\n", IDS) == [None] * 5  # a teardown error beside a test's own
    # an 'E' on one line of several: the lines after it are not shifted onto the wrong tests
    assert lost.outcomes("..   [ 40%]\n.E   [ 60%]\n..   [100%]\n", IDS) == [None] * 5


def test_the_record_fails_what_the_log_did_not_reach_and_merges_the_runs_other_records(tmp_path):
    log = tmp_path / "main.log"
    log.write_text(".s.\nSKIPPED [1] tests/tpu/test_a.py:9: needs tokamax\n")
    other = {
        "kind": "tpu_suite",
        "device": "TPU v5e",
        "versions": {"python": "3.11.7"},
        "commit": "abc1234",
        "dirty": False,
        "tests": {
            "tests/tpu/test_b.py::test_b": {"outcome": "passed", "duration_s": 1.0, "figures": {"x": 1}}
        },
    }
    (tmp_path / "other.json").write_text(json.dumps(other))
    record = lost.merged(
        lost.lost_record("134", str(log), IDS, "aborted"), str(tmp_path / "other.json"), "then"
    )
    tests = record["tests"]
    assert [tests[i]["outcome"] for i in IDS] == ["passed", "skipped", "passed", "failed", "failed"]
    assert tests[IDS[1]]["reason"] == "needs tokamax"
    assert "exit status 134" in tests[IDS[3]]["error"] and all(tests[i]["figures"] is None for i in IDS)
    assert tests["tests/tpu/test_b.py::test_b"]["figures"] == {"x": 1}
    assert record["counts"] == {"passed": 3, "failed": 2, "skipped": 1}
    assert (record["commit"], record["device"], record["lost"]) == (
        "abc1234",
        "TPU v5e",
        {"why": "aborted", "log": "main.log", "tests": 5},
    )


def test_the_suite_stops_before_the_chip_where_a_module_its_record_needs_is_missing(tmp_path):
    """scripts/tpu-suite on a host whose Python finds none of torch_tpu, helion, rich and
    transformers (`python -S`: no site-packages) exits 2 at once, naming them, and runs no test:
    a record that skipped their files whole would miss tests (tests/test_tpu_record.py)."""
    import os
    import subprocess
    import sys

    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    python.chmod(0o755)
    env = dict(os.environ, PYTHON=str(python))
    env.pop("TPU_SUITE_ALLOW_MISSING", None)
    out = subprocess.run(["bash", str(ROOT / "scripts" / "tpu-suite"), str(tmp_path / "out")], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out
    assert "lacks torch_tpu helion rich transformers" in out.stderr and "TPU_SUITE_ALLOW_MISSING" in out.stderr
    assert not (tmp_path / "out" / "tpu_suite_v5e.json").exists() and "pytest" not in out.stdout
