"""`tpu-kernels bench --quick` on the shipped suites (bench/*.py), as README's main job runs it."""

import json
from pathlib import Path

import pytest

from tpu_kernels.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_quick_run_of_every_shipped_suite_writes_a_correct_report(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # suites are found under ./bench, as from the command line
    out = tmp_path / "report"
    assert main(["bench", "--quick", "--rounds", "2", "--min-sample-ms", "2", "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["schema"] == "tpu_kernels.bench/1" and report["device"]["type"] == "cpu"
    names = {r["benchmark"] for r in report["results"]}
    suites = {p.stem for p in (ROOT / "bench").glob("*.py")}
    # every suite contributes (tokamax_ops.py's benchmarks are named per op)
    assert {"scale_add", "softmax", "rmsnorm", "matmul", "overhead"} <= names
    assert any(n.startswith("tokamax_") for n in names) and "tokamax_ops" in suites
    for result in report["results"]:
        for cand in result["candidates"]:
            where = f"{result['benchmark']} {result['point_id']} {cand['name']}"
            assert cand["error"] is None, where
            assert cand["time"]["median"] > 0, where
            assert cand["check"] is None or cand["check"]["passed"], where
    header = (out / "report.csv").read_text().splitlines()[0]
    assert "benchmark" in header and "median" in header
    for name in names:
        png = out / f"{name}.png"
        assert png.exists() and png.stat().st_size > 1000, name
