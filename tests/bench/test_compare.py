"""`tpu-kernels compare` on synthetic reports (no timing here): only the op under test can
regress, and only by more than the two runs' own spread and the machine's drift."""

from __future__ import annotations

import pytest

from tpu_kernels import bench
from tpu_kernels.bench.compare import NOT_UNDER_TEST, verdict
from tpu_kernels.bench.results import CandidateResult, PointResult, Report
from tpu_kernels.cli import main

MS = 1e-3


def _time(median: float, spread: float = 0.02) -> dict:
    """Samples around `median`: p25/p75 at +-spread, p10/p90 at +-2 spread."""
    return {
        "median": median,
        "p10": median * (1 - 2 * spread),
        "p25": median * (1 - spread),
        "p75": median * (1 + spread),
        "p90": median * (1 + 2 * spread),
        "min": median * (1 - 3 * spread),
        "max": median * (1 + 3 * spread),
        "mean": median,
        "stdev": median * spread,
        "cv": spread,
        "n": 5,
    }


def _report(
    times: dict[str, dict], *, primary: str | None = "tpu_kernels", wrong: set[str] = frozenset()
) -> Report:
    candidates = [
        CandidateResult(
            name,
            primary=name == primary,
            time=t,
            check={"passed": name not in wrong, "criterion": "normwise"},
        )
        for name, t in times.items()
    ]
    point = PointResult(
        "softmax", {"shape": [512, 512]}, "shape=512x512", candidates=candidates, baseline="torch"
    )
    return Report({}, {"type": "cpu"}, {"quick": True}, "wall-clock", results=[point])


def _verdicts(old: Report, new: Report) -> dict[str, str]:
    return {c.candidate: verdict(c) for c in bench.compare(old, new, threshold=0.10)}


def test_two_identical_quick_runs_with_a_noisy_baseline_are_no_regression(tmp_path, capsys):
    """The issue's session: the op the same in both runs, torch 30% slower in the second with
    spreads apart. torch is a yardstick, not the op under test: exit 0, and the table says so."""
    old = _report({"tpu_kernels": _time(2 * MS), "torch": _time(1 * MS), "jax": _time(1.5 * MS)})
    new = _report({"tpu_kernels": _time(2 * MS), "torch": _time(1.3 * MS), "jax": _time(2.0 * MS)})
    got = _verdicts(old, new)
    assert got == {
        "tpu_kernels": "ok",
        "torch": f"ok (30% slower ({NOT_UNDER_TEST}))",
        "jax": f"ok (33% slower ({NOT_UNDER_TEST}))",
    }
    old.write_json(tmp_path / "old.json")
    new.write_json(tmp_path / "new.json")
    assert main(["compare", str(tmp_path / "old.json"), str(tmp_path / "new.json")]) == 0
    assert "no regressions" in capsys.readouterr().out


def test_the_op_under_test_regresses_only_beyond_the_spread_of_both_runs(tmp_path, capsys):
    base = {"torch": _time(1 * MS)}
    old = _report({"tpu_kernels": _time(2 * MS, spread=0.05), **base})
    # 20% slower, middle halves apart (2.4 * 0.95 > 2 * 1.05) but p10 under the old p90
    overlapping = _report({"tpu_kernels": _time(2.4 * MS, spread=0.05), **base})
    assert _verdicts(old, overlapping)["tpu_kernels"] == "ok"
    # 30% slower, p10 above the old p90: a regression, and exit 3
    slower = _report({"tpu_kernels": _time(2.6 * MS, spread=0.05), **base})
    assert _verdicts(old, slower)["tpu_kernels"] == "REGRESSION 30% slower (30% relative to torch)"
    old.write_json(tmp_path / "old.json")
    slower.write_json(tmp_path / "new.json")
    assert main(["compare", str(tmp_path / "old.json"), str(tmp_path / "new.json")]) == 3
    assert "1 regression(s)" in capsys.readouterr().out


def test_a_machine_busier_in_one_run_slows_the_baseline_alike_and_is_no_regression():
    """Interleaved rounds: a loaded machine slows every candidate of the run. The op 40% slower
    beside torch 35% slower is the machine; beside torch as before, the op."""
    old = _report({"tpu_kernels": _time(2 * MS), "torch": _time(1 * MS)})
    busy = _report({"tpu_kernels": _time(2.8 * MS), "torch": _time(1.35 * MS)})
    assert _verdicts(old, busy)["tpu_kernels"] == "ok"
    quiet = _report({"tpu_kernels": _time(2.8 * MS), "torch": _time(1 * MS)})
    assert _verdicts(old, quiet)["tpu_kernels"] == "REGRESSION 40% slower (40% relative to torch)"
    alone = _report({"tpu_kernels": _time(2.8 * MS)})  # no baseline timed: the op's own times
    assert _verdicts(_report({"tpu_kernels": _time(2 * MS)}), alone)["tpu_kernels"] == "REGRESSION 40% slower"


def test_a_result_turning_wrong_regresses_the_op_under_test_only():
    times = {"tpu_kernels": _time(2 * MS), "torch": _time(1 * MS)}
    got = _verdicts(_report(times), _report(times, wrong={"torch"}))
    assert got == {"tpu_kernels": "ok", "torch": f"ok (result now wrong ({NOT_UNDER_TEST}))"}
    got = _verdicts(_report(times), _report(times, wrong={"tpu_kernels"}))
    assert got["tpu_kernels"] == "REGRESSION result now wrong"


def test_without_a_primary_candidate_every_candidate_but_the_baseline_is_under_test():
    old = _report({"mine": _time(2 * MS), "other": _time(3 * MS), "torch": _time(1 * MS)}, primary=None)
    new = _report({"mine": _time(3 * MS), "other": _time(3 * MS), "torch": _time(1.3 * MS)}, primary=None)
    got = _verdicts(old, new)
    assert got["mine"] == "REGRESSION 50% slower (15% relative to torch)"
    assert got["other"] == "ok" and got["torch"] == f"ok (30% slower ({NOT_UNDER_TEST}))"


@pytest.mark.parametrize("spread", [0.0, 0.01])
def test_identical_reports_never_regress(spread):
    report = _report({"tpu_kernels": _time(2 * MS, spread), "torch": _time(1 * MS, spread)})
    assert not bench.regressions(bench.compare(report, report))


def test_a_baseline_that_moved_far_more_than_the_op_is_inconclusive_never_ok(tmp_path, capsys):
    """The issue's busy machine: the op 105 us -> 572 us (5.4x), torch's baseline 15.8 us ->
    5.43 ms (its threads fought a CPU-bound neighbour). Relative to torch the op "improved";
    the verdict must be inconclusive, with its own exit status (4, not the regression's 3)."""
    us = 1e-6
    old = _report({"tpu_kernels": _time(105 * us), "torch": _time(15.8 * us), "jax": _time(90 * us)})
    busy = _report({"tpu_kernels": _time(572 * us), "torch": _time(5430 * us), "jax": _time(480 * us)})
    got = _verdicts(old, busy)
    assert got["tpu_kernels"].startswith("INCONCLUSIVE 445% slower, but torch 344x slower")
    assert got["torch"] == f"ok (34267% slower ({NOT_UNDER_TEST}))"
    old.write_json(tmp_path / "old.json")
    busy.write_json(tmp_path / "new.json")
    assert main(["compare", str(tmp_path / "old.json"), str(tmp_path / "new.json")]) == 4
    out = capsys.readouterr().out
    assert "1 inconclusive" in out and "no regressions" not in out
    # quiet, the same op change is a regression (exit 3), which outranks an inconclusive one
    quiet = _report({"tpu_kernels": _time(572 * us), "torch": _time(15.8 * us), "jax": _time(90 * us)})
    quiet.write_json(tmp_path / "quiet.json")
    assert main(["compare", str(tmp_path / "old.json"), str(tmp_path / "quiet.json")]) == 3
    md = tmp_path / "cmp.md"
    assert (
        main(["compare", str(tmp_path / "old.json"), str(tmp_path / "new.json"), "--markdown", str(md)]) == 4
    )
    assert md.read_text().startswith("**0 regression(s)**, 1 inconclusive, among 3 measurements")


@pytest.mark.parametrize(
    "op_ratio, torch_ratio, want",
    [
        (1.4, 1.35, "ok"),  # the machine slowed both alike
        (1.4, 1.5, "ok"),  # the baseline a little more: within the threshold of the op
        (1.4, 1.6, "INCONCLUSIVE"),  # more than 10% beyond the op: no verdict
        (1.0, 50.0, "ok"),  # the op did not slow at all: nothing to judge
        (1.4, 1.0, "REGRESSION"),
    ],
)
def test_how_far_the_baseline_may_move_before_the_verdict_is_inconclusive(op_ratio, torch_ratio, want):
    old = _report({"tpu_kernels": _time(2 * MS), "torch": _time(1 * MS)})
    new = _report({"tpu_kernels": _time(2 * op_ratio * MS), "torch": _time(torch_ratio * MS)})
    assert _verdicts(old, new)["tpu_kernels"].split()[0] == want
