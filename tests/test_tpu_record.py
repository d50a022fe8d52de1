"""The TPU suite's committed record (bench/reports/tpu_suite_v5e.json, written by
`scripts/tpu-suite` on a chip) and the torch-on-TPU per-call record: read as the CPU suite reads
the JAX-half record. These check the records are whole and consistent, not that a time is fast."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
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
    "a call's cost: plain TPU calls skip the dispatcher": "test_plain_calls_skip_the_dispatcher_and_give_its_result",
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


def test_reruns_name_their_commit_files_and_tests(record):
    """Tests run again at a later commit (a part of the suite, where the device time allowed no
    more) carry that commit, which a rerun entry names with its files and reason."""
    reruns = {r["commit"]: r for r in record.get("reruns", [])}
    later = {k: t for k, t in record["tests"].items() if "commit" in t}
    for commit, rerun in reruns.items():
        ours = [k for k, t in later.items() if t["commit"] == commit]
        assert len(ours) == rerun["tests"] and rerun["why"]
        assert {k.split("::")[0] for k in ours} == set(rerun["files"])
        out = subprocess.run(["git", "cat-file", "-t", commit], cwd=ROOT, capture_output=True, text=True)
        assert out.returncode != 0 and "not a git repository" in out.stderr or out.stdout.strip() == "commit"
    assert all(t["commit"] in reruns for t in later.values())


def test_each_helion_twin_ran_within_issue_57s_bound_of_its_pallas_op(record):
    """Issue 57's target for the Helion twins, read from the record (no test times anything):
    at most 1.5x their Pallas ops per call through torch on the chip."""
    runs = {k: t for k, t in record["tests"].items() if "test_helion_twin_speed_is_recorded" in k}
    assert len(runs) == 4
    for key, t in runs.items():
        assert t["outcome"] == "passed" and t["figures"]["helion_over_pallas"] <= 1.5, (key, t["figures"])


@pytest.mark.parametrize("failure", sorted(FAILURE_TESTS))
def test_each_of_issue_57s_failures_has_a_test_that_passed_on_the_chip(record, failure):
    name = FAILURE_TESTS[failure]
    runs = {k: t for k, t in record["tests"].items() if k.split("::")[-1].split("[")[0] == name}
    assert runs and all(t["outcome"] == "passed" for t in runs.values()), {
        k: t["outcome"] for k, t in runs.items()
    }


def test_precision_figures_are_within_their_bounds(record):
    from tests.tpu.test_ops import F32_BOUND  # the same table the chip's test asserted

    runs = {k: t for k, t in record["tests"].items() if "test_matmul_at_every_float32_precision_setting" in k}
    if runs and all(t["figures"] is None for t in runs.values()):
        pytest.skip(f"the record's figures of these tests were lost: {record['lost']['why']}")
    for key, t in runs.items():
        if t["outcome"] != "passed":
            continue
        setting = next(s for s in F32_BOUND if f"-{s}]" in key)
        bound = F32_BOUND[setting] if "[torch.float32-" in key else 1e-2
        assert max(t["figures"].values()) < bound, (key, t["figures"])


def test_figures_are_missing_only_where_the_record_says_they_were_lost(record):
    lost = [k for k, t in record["tests"].items() if t["figures"] is None]
    assert not lost or len(lost) <= record["lost"]["tests"], lost


def test_a_record_rebuilt_from_a_log_holds_the_outcomes_that_log_shows(record):
    """scripts/tpu_suite_lost.py's reading of the committed log: the tests whose figures were lost
    have, outcome for outcome, the log's progress characters and its summary line's counts."""
    if "lost" not in record:
        pytest.skip("the committed record is the suite's own, not rebuilt from a log")
    lost_script = _script("tpu_suite_lost")
    log = (SUITE.parent / record["lost"]["log"]).read_text()
    from_log = [t["outcome"] for t in record["tests"].values() if t["figures"] is None]
    assert len(from_log) == record["lost"]["tests"]
    chars = "".join(lost_script._PROGRESS_LINE.findall(log))
    assert len(chars) == len(from_log)
    for outcome in ("passed", "skipped", "failed"):
        n = sum(o == outcome for o in from_log)
        assert n == sum(lost_script.PROGRESS[c] == outcome for c in chars), outcome
        summary = re.search(rf"(\d+) {outcome}", _summary(log))
        assert n == (int(summary.group(1)) if summary else 0), (outcome, _summary(log))


def _summary(log: str) -> str:
    return next(line for line in reversed(log.splitlines()) if re.search(r"\d+ (passed|failed|skipped)", line))


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


def test_the_per_call_record_is_the_suites_run():
    """Both records come from one `scripts/tpu-suite` run: the same commit, on a TPU."""
    per, suite = json.loads(PER_CALL.read_text()), json.loads(SUITE.read_text())
    assert per["commit"] == suite["commit"] and "TPU" in per["device"]


def test_layer_speedups_are_the_ratios_of_their_times():
    """Each speedup is torch_tpu's time over tpu_kernels' with the same attention, and the torch
    layer's speed over the JAX layer is that record's time over this one's, from the JAX record
    the torch record names (a ratio inverted or taken against another row would read 2x for 0.5x)."""
    per = json.loads(PER_CALL.read_text())
    layer = per["layer"]
    seen = 0
    for mode in ("eager", "compiled"):
        for kind in ("forward", "forward_backward"):
            for suffix in ("", "_flash"):
                speedup = layer.get(f"{mode}_{kind}_speedup{suffix}")
                if speedup is None:
                    continue
                seen += 1
                ours = layer[f"{mode}_tpu_kernels{suffix}_{kind}_us"]
                native = layer[f"{mode}_torch_tpu{suffix}_{kind}_us"]
                assert speedup == pytest.approx(native / ours, abs=1e-3), (mode, kind, suffix)
    assert seen >= 4, layer
    vs = per["layer_vs_jax"]
    jax_rows = {
        r["backward"]: r for r in json.loads((ROOT / vs["jax_layer"]["record"]).read_text())["layer"]["rows"]
    }
    assert vs["jax_layer"]["forward_us"] == pytest.approx(jax_rows[False]["ours_ms"] * 1e3)
    assert vs["jax_layer"]["forward_backward_us"] == pytest.approx(jax_rows[True]["ours_ms"] * 1e3)
    assert vs["dims"]["tokens"] == jax_rows[False]["dims"]["tokens"]
    for mode in ("eager", "compiled"):
        for kind in ("forward", "forward_backward"):
            torch_us = vs[f"{mode}_tpu_kernels_flash_{kind}_us"]
            expected = vs["jax_layer"][f"{kind}_us"] / torch_us
            assert vs[f"{mode}_{kind}_speed_vs_jax"] == pytest.approx(expected, abs=1e-3), (mode, kind)


def test_the_layers_pieces_are_its_kernels_at_its_dims():
    """Where the torch layer's time goes (bench/torch_on_tpu.py, measure_pieces): each of the
    layer's kernels, forward and forward + backward, through torch and as its JAX twin, at the
    dims of the layer compared with the JAX one."""
    per = json.loads(PER_CALL.read_text())
    pieces = per["layer_pieces"]
    d = pieces["dims"]
    assert d == per["layer_vs_jax"]["dims"]
    t, width, ffn = d["tokens"], d["d"], d["ffn"]
    assert set(pieces["pieces"]) == {
        f"matmul {t}x{width}x{width}",
        f"matmul {t}x{width}x{ffn}",
        f"matmul {t}x{ffn}x{width}",
        f"rmsnorm {t}x{width}",
        f"flash 1x{d['heads']}x{t}x{d['head_dim']}",
    }
    for name, row in pieces["pieces"].items():
        for side in ("torch", "jax"):
            assert 0 < row[f"{side}_forward_us"] < row[f"{side}_forward_backward_us"], (name, side)
        assert 0 < row["torch_forward_host_us"] and 0 < row["torch_forward_backward_host_us"], name


def test_the_headline_names_the_suites_commit_and_its_reruns(record):
    """README's torch-on-TPU headline (bench/torch_on_tpu.py's `headline`) says the suite's
    commit and, for tests run again later, how many and at which commit."""
    from tpu_kernels.docs_perf import script  # README's generator loads it so

    text = script("torch_on_tpu").headline(json.loads(PER_CALL.read_text()), record)
    assert f"tests at {record['commit'][:10]}" in text
    for rerun in record.get("reruns", []):
        assert f"{rerun['tests']} rerun at {rerun['commit'][:10]}" in text
