"""bench/startup.py: its child's phases add up, its table and goals read the figures right,
and the command harness does not pick it up as a suite (it runs fresh processes for minutes)."""

from pathlib import Path

import pytest

from tests.helpers import load_bench_script
from tpu_kernels.bench import discover

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def startup():
    return load_bench_script("startup")


def test_the_child_splits_a_first_call_into_phases(startup, tmp_path, monkeypatch):
    from tpu_kernels.runtime import cache

    monkeypatch.setenv("TPU_KERNELS_CACHE_DIR", str(tmp_path))
    before = cache.STATS.hits + cache.STATS.misses
    r = startup.child("scale_add")  # in this process: the imports are already done
    for phase in startup.PHASES:
        assert r[phase] >= 0 or phase == "other", (phase, r)
    assert r["first_call"] == pytest.approx(r["trace"] + r["lower"] + r["compile"] + r["other"])
    # counts are the process's: one more build at most (none when this shape was built before)
    assert r["disk"]["hits"] + r["disk"]["misses"] - before <= 1


def _runs(first_call: float, tk_import: float = 0.1) -> list[dict]:
    phases = dict.fromkeys(("imports", "trace", "lower", "compile", "other"), 0.01)
    return [{**phases, "tk_import": tk_import, "first_call": first_call}]


def test_table_and_goals(startup):
    results = {
        "softmax": {"cold": _runs(1.0), "warm": _runs(0.15)},
        "matmul": {"cold": _runs(1.0, 0.5), "warm": _runs(0.4, 0.5)},
    }
    text = startup.table(results)
    assert "| softmax | warm |" in text and "| 15.0% |" in text and "| 40.0% |" in text
    goals = startup.goals(results)
    assert goals[0] == "softmax: warm first call 15.0% of cold (goal <= 30%): met"
    assert goals[1] == "matmul: warm first call 40.0% of cold (goal <= 30%): MISSED"
    assert goals[2].startswith("tpu_kernels import over torch+jax: 0.30 s")


def test_it_is_not_a_harness_suite():
    assert ROOT / "bench" / "startup.py" not in discover.suite_files(None, root=ROOT)
