"""What `tpu-kernels bench` runs by default on each device, the --full flag, and the plan and
estimate it prints first (tpu_kernels/bench/plan.py). No timed assertions: the estimates are
checked against figures written into reports here."""

from __future__ import annotations

import os

import pytest
import torch

from tpu_kernels import bench
from tpu_kernels.bench import plan
from tpu_kernels.bench.results import CandidateResult, PointResult, Report
from tpu_kernels.cli import main
from tpu_kernels.commands.bench import sweep_for

SETTINGS = bench.Settings(rounds=4, min_sample_s=0.01, lead_in_s=0.01)


def _toy(points=((64, 64), (512, 512)), reduced=((64, 64),)) -> bench.Benchmark:
    return bench.Benchmark(
        name="toy",
        points=bench.grid(shape=list(points), dtype=[torch.float32]),
        reduced_points=bench.grid(shape=list(reduced), dtype=[torch.float32]) if reduced else None,
        quick_points=bench.grid(shape=[points[0]], dtype=[torch.float32]),
        inputs=lambda p, dev: (torch.randn(*p["shape"], device=dev),),
        candidates=lambda p: [
            bench.Candidate("mine", lambda x: x * 2, primary=True),
            bench.Candidate("torch", lambda x: x + x),
        ],
        reference=lambda x: 2 * x,
    )


def _candidate(name: str, median: float, first: float, warmup: int = 3) -> CandidateResult:
    return CandidateResult(name, first_call_s=first, warmup_calls=warmup, time={"median": median})


def _report(device_name: str = "test", wall_s: float = 30.0) -> Report:
    """An earlier run of the toy's 512x512 point, with figures chosen here."""
    point = PointResult(
        "toy",
        {"shape": [512, 512], "dtype": "float32"},
        "shape=512x512,dtype=float32",
        input_sets=4,
        candidates=[_candidate("mine", 0.5, 2.0), _candidate("torch", 0.001, 0.01, warmup=20)],
        wall_s=wall_s,
    )
    return Report(
        environment={},
        device={"type": "cpu", "name": device_name, "peaks": None},
        settings=SETTINGS.to_dict(),
        timer="",
        results=[point],
    )


# ---- which sizes -------------------------------------------------------------------------------


def test_a_cpu_runs_the_reduced_sizes_and_accelerators_the_full_ones():
    assert sweep_for("cpu") == "reduced"
    assert sweep_for("cuda") == "full" and sweep_for("tpu") == "full"
    assert sweep_for("cpu", full=True) == "full" and sweep_for("tpu", quick=True) == "quick"
    with pytest.raises(ValueError, match="--quick and --full"):
        sweep_for("cpu", quick=True, full=True)


def test_a_benchmark_without_reduced_points_runs_all_of_them_reduced():
    b = _toy(reduced=None)
    assert b.sweep(reduced=True) == b.points
    assert [p["shape"] for p in _toy().sweep(reduced=True)] == [(64, 64)]
    assert [p["shape"] for p in _toy().sweep(True, reduced=True)] == [(64, 64)]  # --quick wins


def test_every_shipped_family_names_reduced_sizes_from_its_bench_sizes():
    from tpu_kernels.kernels import FAMILIES

    for family in FAMILIES.values():
        reduced = family.reduced_shapes()
        assert reduced and all(s in family.shapes.BENCH.values() for s in reduced), family.name
    # the interpreter's most expensive point: a 2048-cubed matmul is for accelerators only
    assert (2048, 2048, 2048) not in FAMILIES["matmul"].reduced_shapes()
    assert (2048, 2048, 2048) in FAMILIES["matmul"].shapes.BENCH.values()


def test_the_tokamax_suite_cuts_its_written_cases_only_for_the_reduced_run():
    from tpu_kernels.bench import discover

    suite = discover.import_suite(discover.shipped_dir() / "tokamax_ops.py")
    by_name = {b.name: b for b in suite.benchmarks(quick=False, device_type="cpu")}
    attention = by_name["tokamax_attention"]
    assert [p["shape"] for p in attention.sweep(reduced=True)] == list(suite.CPU_ATTENTION)
    assert [p["shape"] for p in attention.sweep()] == list(suite.attention.shapes.BENCH)
    norm = by_name["tokamax_rms_norm"]
    assert [p["shape"] for p in norm.sweep(reduced=True)] == list(suite.CPU_NORM.values())
    assert [p["shape"] for p in norm.sweep()] == list(suite.normalization.shapes.BENCH.values())


# ---- the estimate --------------------------------------------------------------------------------


def test_the_protocol_formula_counts_every_call_the_harness_makes():
    s = bench.Settings(rounds=10, min_sample_s=0.02, lead_in_s=0.02)
    # a slow call: one call per sample and one lead-in call; 1 first + 3 warm-up + 10 x 2 + (1 + 3)
    assert plan.candidate_seconds(2.0, 5.0, 3, s) == pytest.approx(5.0 + 3 * 2 + 20 * 2 + 4 * 2)
    # a fast call: samples of ceil(0.02 / 0.001) = 20 calls, lead-ins of 20; no plain loop without rotation
    assert plan.candidate_seconds(0.001, 0.5, 50, s, rotating=False) == pytest.approx(
        0.5 + 0.05 + 10 * 40 * 0.001
    )


def test_an_unchanged_rerun_is_estimated_at_the_earlier_runs_wall_time():
    earlier = plan.History()
    earlier.add(_report(wall_s=30.0), "earlier.json")
    p = plan.make([_toy()], "full", SETTINGS, earlier)
    big = p.points[1]
    assert big.point_id == "shape=512x512,dtype=float32" and big.source == "earlier.json"
    assert big.seconds == pytest.approx(30.0)
    assert p.points[0].seconds is None and p.unknown == 1
    assert p.total_s() == pytest.approx(60.0)  # the unknown point is counted at the known median


def test_more_rounds_cost_more_by_the_formula_and_the_rest_is_kept():
    earlier = plan.History()
    earlier.add(_report(wall_s=30.0), "earlier.json")
    more = bench.Settings(rounds=8, min_sample_s=0.01, lead_in_s=0.01)
    [_, big] = plan.make([_toy()], "full", more, earlier).points
    # "mine" (0.5 s a call): 4 more rounds of one lead-in and one sampled call each
    # "torch" (1 ms): 4 more rounds of 10 lead-in and 10 sampled calls
    assert big.seconds == pytest.approx(30.0 + 4 * 2 * 0.5 + 4 * 20 * 0.001)


def test_a_report_of_another_machine_or_device_is_not_used_but_the_reference_is(tmp_path):
    (tmp_path / "results" / "a").mkdir(parents=True)
    _report(device_name="other cpu", wall_s=99.0).write_json(tmp_path / "results" / "a" / "report.json")
    (tmp_path / "results" / "b").mkdir()
    (tmp_path / "results" / "b" / "report.json").write_text("{not json")  # skipped, not fatal
    reference = tmp_path / "cpu.json"
    _report(device_name="reference cpu", wall_s=12.0).write_json(reference)
    device = {"type": "cpu", "name": "test"}
    found = plan.history(device, tmp_path / "results", reference)
    assert found.sources == [str(reference)]
    assert found.get("toy", "shape=512x512,dtype=float32").result.wall_s == 12.0
    # this machine's own report comes first
    (tmp_path / "results" / "c").mkdir()
    _report(device_name="test", wall_s=7.0).write_json(tmp_path / "results" / "c" / "report.json")
    found = plan.history(device, tmp_path / "results", reference)
    assert found.get("toy", "shape=512x512,dtype=float32").result.wall_s == 7.0
    assert plan.history({"type": "cuda", "name": "test"}, tmp_path / "results", reference).sources == []


def test_the_printed_plan_names_each_benchmark_its_points_and_how_it_was_estimated():
    earlier = plan.History()
    earlier.add(_report(wall_s=30.0), "earlier.json")
    b = _toy()
    lines = plan.describe(plan.make([b], "full", SETTINGS, earlier), [b], "cpu")
    assert lines[0] == f"plan: 2 points of 1 benchmark, {SETTINGS.rounds} rounds each, the full sizes"
    assert (
        lines[1]
        == "  toy   2 points x 2 candidates  ~60 s (1 without earlier figures)  shape=64x64, 512x512; dtype=float32"
    )
    assert lines[2] == (
        "estimate: about 60 s (1 of 2 points from earlier runs (earlier.json); 1 counted at 30 s "
        "each; method: tpu_kernels/bench/plan.py)"
    )
    reduced = plan.make([b], "reduced", SETTINGS)
    lines = plan.describe(reduced, [b], "cpu")
    assert (
        lines[0] == f"plan: 1 point of 1 benchmark, {SETTINGS.rounds} rounds each, the reduced sizes, "
        "the default on cpu (--full for every size)"
    )
    assert "no earlier run timed these points; 1 counted at 5 s each" in lines[-1]


def test_a_point_of_a_failed_candidate_is_not_charged_for_it():
    report = _report(wall_s=30.0)
    report.results[0].candidates.append(CandidateResult("gone", error="RuntimeError: not here"))
    earlier = plan.History()
    earlier.add(report, "earlier.json")
    names = ("mine", "torch", "gone")
    assert earlier.get("toy", "shape=512x512,dtype=float32").seconds(names, SETTINGS) == pytest.approx(30.0)


# ---- the command ---------------------------------------------------------------------------------

SUITE = """
import torch
from tpu_kernels import bench

def benchmarks(quick, device_type):
    return [bench.Benchmark(
        name="toy",
        points=bench.grid(shape=[(16, 16), (32, 32)], dtype=[torch.float32]),
        reduced_points=bench.grid(shape=[(16, 16)], dtype=[torch.float32]),
        inputs=lambda p, dev: (torch.randn(*p["shape"], device=dev),),
        candidates=lambda p: [bench.Candidate("mine", lambda x: x * 2, primary=True),
                              bench.Candidate("torch", lambda x: x + x)],
        reference=lambda x: 2 * x)]
"""


def test_the_command_prints_the_plan_first_and_full_runs_every_size(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "toy.py").write_text(SUITE)
    args = ["bench", "toy.py", "--rounds", "1", "--min-sample-ms", "1", "--no-plots"]
    assert main([*args, "--out", "a"]) == 0
    out = capsys.readouterr().out
    plan_at, first_point = (
        out.index("plan: 1 point of 1 benchmark, 1 round each, the reduced sizes"),
        out.index("] toy "),
    )
    assert plan_at < out.index("estimate: about") < first_point
    assert "1/1] toy shape=16x16,dtype=float32" in out
    report = Report.read_json(tmp_path / "a" / "report.json")
    assert report.settings["sweep"] == "reduced" and [r.point_id for r in report.results] == [
        "shape=16x16,dtype=float32"
    ]
    assert report.wall_s > 0 and report.results[0].wall_s > 0
    assert 0 < report.cpu_s <= report.wall_s * os.cpu_count()  # its threads, on the cores there are
    assert report.environment["load_average"] is not None

    assert main([*args, "--full", "--out", str(tmp_path / "bench-results" / "b")]) == 0
    out = capsys.readouterr().out
    assert "plan: 2 points of 1 benchmark, 1 round each, the full sizes" in out
    report = Report.read_json(tmp_path / "bench-results" / "b" / "report.json")
    assert report.settings["sweep"] == "full" and len(report.results) == 2

    # a rerun finds that report under ./bench-results and estimates both points from it
    assert main([*args, "--full", "--out", "c"]) == 0
    assert "(2 of 2 points from earlier runs (bench-results/b/report.json)" in capsys.readouterr().out


def test_quick_and_full_together_are_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "--quick", "--full"])
    assert exit_.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_each_sweep_has_its_settings_and_options_override_them():
    """A CPU's default (reduced) run times fewer rounds with a shorter warm-up than a full one,
    with the same samples; --quick keeps QUICK's; --rounds wins over any of them."""
    from tpu_kernels.bench import timing

    full, reduced, quick = (timing.for_sweep(s) for s in ("full", "reduced", "quick"))
    assert full == timing.Settings()
    assert (reduced.rounds, reduced.warmup_s) == (timing.REDUCED.rounds, timing.REDUCED.warmup_s)
    assert reduced.rounds < full.rounds and reduced.warmup_s < full.warmup_s
    assert (reduced.min_sample_s, reduced.lead_in_s) == (full.min_sample_s, full.lead_in_s)
    assert quick == timing.quick(timing.Settings())


def test_the_command_times_the_reduced_sweep_with_its_settings(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "toy.py").write_text(SUITE)
    from tpu_kernels.bench import timing

    assert main(["bench", "toy.py", "--no-plots", "--min-sample-ms", "1", "--out", "a"]) == 0
    assert f"{timing.REDUCED.rounds} rounds each, the reduced sizes" in capsys.readouterr().out
    settings = Report.read_json(tmp_path / "a" / "report.json").settings
    assert (settings["rounds"], settings["warmup_s"]) == (timing.REDUCED.rounds, timing.REDUCED.warmup_s)
    assert main(["bench", "toy.py", "--no-plots", "--min-sample-ms", "1", "--rounds", "2", "--out", "b"]) == 0
    assert Report.read_json(tmp_path / "b" / "report.json").settings["rounds"] == 2


def test_a_busy_machine_is_named_after_the_estimate():
    assert plan.busy_note(1.9, 2) is None
    assert plan.busy_note(4.25, 2) == (
        "note: this machine is busy (load average 4.2 on 2 cores): expect the run to take longer than estimated"
    )
    assert "on 1 core)" in plan.busy_note(3.0, 1)
