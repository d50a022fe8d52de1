"""The TPU suite's committed record (bench/reports/tpu_suite_v5e.json, written by
`scripts/tpu-suite` on a chip) and the torch-on-TPU per-call record: read as the CPU suite reads
the JAX-half record. These check the records are whole and consistent, not that a time is fast."""

from __future__ import annotations

import ast
import json
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "bench" / "reports" / "tpu_suite_v5e.json"
PER_CALL = ROOT / "bench" / "reports" / "torch_tpu_v5e.json"

# issue 57's five failures, each with the TPU test that shows it (fixed or not)
FAILURE_TESTS = {
    "derived backward on TPU tensors": "test_forward_and_backward_match_float64_on_the_host",
    "bf16 matmul under a float32 precision setting": "test_matmul_at_every_float32_precision_setting",
    "torch.compile fullgraph on torch 2.13": "test_compile_tpu_backend_fullgraph_three_shapes",
    "explain over matmul": "test_explain_reports_no_graph_break_over_matmul",
}


@pytest.fixture(scope="module")
def record():
    return json.loads(SUITE.read_text())


def _tpu_test_functions() -> set[str]:
    names = set()
    for path in (ROOT / "tests" / "tpu").glob("test_*.py"):
        tree = ast.parse(path.read_text())
        names |= {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}
    return names


def test_the_record_ran_on_the_chip_at_the_tpu_hosts_versions(record):
    assert record["kind"] == "tpu_suite" and "TPU" in record["device"]
    v = record["versions"]
    assert v["python"].startswith("3.11") and v["torch"].startswith("2.13") and v["jax"].startswith("0.10")


def test_the_records_commit_is_in_this_history(record):
    commit = record["commit"]
    out = subprocess.run(["git", "cat-file", "-t", commit], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0 and "not a git repository" in out.stderr:
        pytest.skip("no git history here")
    assert out.stdout.strip() == "commit", (commit, out.stderr)


def test_counts_match_the_outcomes_and_every_test_function_is_in_the_record(record):
    tests = record["tests"]
    for outcome in ("passed", "failed", "skipped"):
        assert record["counts"][outcome] == sum(t["outcome"] == outcome for t in tests.values())
    recorded = {k.split("::")[-1].split("[")[0] for k in tests}
    assert recorded == _tpu_test_functions(), recorded ^ _tpu_test_functions()
    for t in tests.values():
        assert t["outcome"] != "failed" or t.get("error"), t  # a failure carries its error


@pytest.mark.parametrize("failure", sorted(FAILURE_TESTS))
def test_each_of_issue_57s_failures_has_a_test_that_passed_on_the_chip(record, failure):
    name = FAILURE_TESTS[failure]
    runs = {k: t for k, t in record["tests"].items() if k.split("::")[-1].split("[")[0] == name}
    assert runs and all(t["outcome"] == "passed" for t in runs.values()), {
        k: t["outcome"] for k, t in runs.items()
    }


def test_precision_figures_are_within_their_bounds(record):
    from tests.tpu.test_ops import F32_BOUND  # the same table the chip's test asserted

    for key, t in record["tests"].items():
        if "test_matmul_at_every_float32_precision_setting" not in key or t["outcome"] != "passed":
            continue
        setting = next(s for s in F32_BOUND if f"-{s}]" in key)
        bound = F32_BOUND[setting] if "[torch.float32-" in key else 1e-2
        assert max(t["figures"].values()) < bound, (key, t["figures"])


def test_per_call_record_bounds_are_issue_57s_rule():
    per = json.loads(PER_CALL.read_text())["per_call"]
    for op, times in per["ops"].items():
        assert times["bound_us"] == pytest.approx(1.1 * times["jax_op_pallas"] + 10, abs=0.11), op
        assert {
            "torch_tpu",
            "jax_op_pallas",
            "jax_op_jnp",
            "tpu_kernels",
            "tpu_kernels_requires_grad",
        } <= set(times)
