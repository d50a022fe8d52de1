"""The harness end to end: correctness flags, reports, plots, compare mode, the CLI."""

import json
import time

import pytest
import torch

from tpu_kernels import bench
from tpu_kernels.bench import plots
from tpu_kernels.bench.device import Device
from tpu_kernels.bench.results import Report
from tpu_kernels.cli import main

CPU = Device("cpu", "test", torch.device("cpu"), None)
FAST = bench.Settings(rounds=3, min_sample_s=0.002, warmup_s=0.05, warmup_calls=2)


def _softmax_benchmark(wrong: bool = False) -> bench.Benchmark:
    def broken(x):
        return torch.softmax(x, -1) + (1e-2 if wrong else 0.0)

    return bench.Benchmark(
        name="toy_softmax",
        points=bench.grid(shape=[(64, 128), (256, 128)], dtype=[torch.float32]),
        inputs=lambda p, dev: (torch.randn(*p["shape"], dtype=p["dtype"], device=dev),),
        candidates=lambda p: [
            bench.Candidate("mine", broken, primary=True),
            bench.Candidate("torch", lambda x: torch.softmax(x, -1)),
        ],
        reference=lambda x: torch.softmax(x, -1),
        bytes=lambda p: 2 * 4 * p["shape"][0] * p["shape"][1],
    )


def test_a_wrong_kernel_is_flagged_whatever_its_speed():
    report = bench.run([_softmax_benchmark(wrong=True)], CPU, FAST)
    for point in report.results:
        mine, ref = point.candidate("mine"), point.candidate("torch")
        assert mine.wrong and mine.check["max_abs_err"] == pytest.approx(1e-2, rel=1e-3)
        assert not ref.wrong
        assert mine.time["median"] > 0  # still timed, and flagged


def test_report_round_trips_through_json_and_csv(tmp_path):
    report = bench.run([_softmax_benchmark()], CPU, FAST)
    report.write_json(tmp_path / "r.json")
    again = Report.read_json(tmp_path / "r.json")
    assert again.to_dict() == json.loads((tmp_path / "r.json").read_text())
    assert again.results[0].candidates[0].time == report.results[0].candidates[0].time
    assert json.loads((tmp_path / "r.json").read_text())["schema"] == "tpu_kernels.bench/1"
    env = again.environment
    assert env["packages"]["torch"] and "time" in env and "git_commit" in env
    report.write_csv(tmp_path / "r.csv")
    lines = (tmp_path / "r.csv").read_text().splitlines()
    assert lines[0].startswith("benchmark,point_id,candidate") and len(lines) == 1 + 2 * 2
    with pytest.raises(ValueError, match="schema"):
        Report.from_dict({"schema": "other"})


def test_speedups_throughput_and_rotation():
    report = bench.run([_softmax_benchmark()], CPU, FAST)
    point = report.results[0]
    assert point.candidate("torch").speedup == pytest.approx(1.0)
    mine = point.candidate("mine")
    assert mine.speedup == pytest.approx(point.candidate("torch").median / mine.median)
    assert mine.throughput["gbps"] > 0 and mine.throughput["pct_peak_bw"] is None  # no roofline on CPU
    assert point.input_sets >= 2
    assert any("do not predict TPU speed" in n for n in report.notes) or report.device["type"] != "cpu"


def test_plots_are_written_and_not_empty(tmp_path):
    report = bench.run([_softmax_benchmark()], CPU, FAST)
    paths = plots.write(report, tmp_path)
    assert [p.name for p in paths] == ["toy_softmax.png", "summary.png"]
    for path in paths:
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_log_axes_label_only_major_ticks():
    """Minor labels on a log axis piled up into an unreadable column: only major ticks are
    labelled, over a wide and over a narrow range."""
    import matplotlib.pyplot as plt
    from matplotlib import ticker

    for lo, hi in ((0.01, 300.0), (3.1, 4.4)):
        fig, ax = plt.subplots()
        ax.plot([0, 1], [lo, hi])
        ax.set_yscale("log")
        plots._log_axis(ax.yaxis, lo, hi)
        fig.canvas.draw()
        assert isinstance(ax.yaxis.get_minor_formatter(), ticker.NullFormatter)
        majors = [t for t in ax.yaxis.get_major_ticks() if lo <= t.get_loc() <= hi]
        assert 2 <= len(majors) <= 12, (lo, hi, [t.get_loc() for t in majors])
        plt.close(fig)


def test_summary_speedups_are_geometric_means_against_the_baseline():
    report = bench.run([_softmax_benchmark()], CPU, FAST)
    got = plots.speedups(report)["toy_softmax"]
    assert set(got) == {"mine"}  # the baseline ("torch") is not compared with itself
    ups = [r.candidate("mine").speedup for r in report.results]
    assert got["mine"] == pytest.approx((ups[0] * ups[1]) ** 0.5)


def test_first_call_includes_compilation():
    """The first call of a point is timed as such (tracing and compiling included), not the
    first call of the warm-up, which comes after the correctness check."""
    calls = []

    def slow_first(x):
        if not calls:
            time.sleep(0.05)
        calls.append(1)
        return torch.softmax(x, -1)

    b = _softmax_benchmark()
    b = bench.Benchmark(
        name="first",
        points=b.points[:1],
        inputs=b.inputs,
        candidates=lambda p: [bench.Candidate("mine", slow_first, primary=True)],
        reference=b.reference,
    )
    [point] = bench.run([b], CPU, FAST).results
    mine = point.candidate("mine")
    assert mine.first_call_s >= 0.05 > mine.median


def _with_times(report: Report, median: float, spread: float = 0.02, only: str | None = None) -> Report:
    """A copy of `report` whose every candidate (or only the one named `only`) took `median` s,
    its samples within +-spread (p25/p75) and +-1.5 spread (p10/p90): no noise."""
    data = report.to_dict()
    for r in data["results"]:
        for c in r["candidates"]:
            if only is not None and c["name"] != only:
                continue
            c["time"] = {
                **c["time"],
                "median": median,
                "p10": median * (1 - 1.5 * spread),
                "p25": median * (1 - spread),
                "p75": median * (1 + spread),
                "p90": median * (1 + 1.5 * spread),
            }
    return Report.from_dict(data)


def test_compare_flags_regressions_and_the_cli_exits_nonzero(tmp_path, capsys):
    base = _with_times(bench.run([_softmax_benchmark()], CPU, FAST), 0.010)
    slower = _with_times(base, 0.015, only="mine")  # the op under test; torch as before
    changes = bench.compare(base, slower, threshold=0.10)
    mine = [c for c in changes if c.candidate == "mine"]
    assert mine and all(c.regressed and c.ratio == pytest.approx(1.5) for c in mine)
    assert not bench.regressions(
        bench.compare(base, _with_times(base, 0.0105, only="mine"), threshold=0.10)
    )  # under threshold
    noisy = _with_times(base, 0.012, spread=0.3, only="mine")  # 20% slower, but within the noise
    assert not bench.regressions(bench.compare(_with_times(base, 0.010, spread=0.3), noisy, threshold=0.10))
    base.write_json(tmp_path / "base.json")
    slower.write_json(tmp_path / "new.json")
    assert main(["compare", str(tmp_path / "base.json"), str(tmp_path / "new.json")]) == 3
    assert "REGRESSION" in capsys.readouterr().out
    assert main(["compare", str(tmp_path / "base.json"), str(tmp_path / "base.json")]) == 0


def test_compare_never_cuts_points_apart_and_writes_markdown(tmp_path, capsys):
    """In a narrow terminal the point column folds: float32 and bfloat16 rows stay distinct."""
    from rich.console import Console

    from tpu_kernels.commands.compare import print_comparison

    base = bench.run([_softmax_benchmark()], CPU, FAST)
    data = base.to_dict()
    long_id = "shape=4096x4096,block_rows=256,dtype=bfloat16"
    data["results"][0]["point_id"] = long_id
    data["results"][1]["point_id"] = long_id.replace("bfloat16", "float32")
    report = Report.from_dict(data)
    console = Console(width=60, record=True)
    md = tmp_path / "cmp.md"
    assert print_comparison(console, report, report, 0.1, markdown=md) == 0
    text = console.export_text().replace("\n", "").replace("│", "").replace(" ", "")
    assert "bfloat16" in text and "float32" in text and "…" not in text
    table = md.read_text()
    assert "| toy_softmax | shape=4096x4096,block_rows=256,dtype=bfloat16 | mine |" in table
    assert table.startswith("**0 regression(s)**")


def test_a_result_that_turns_wrong_is_a_regression():
    good = bench.run([_softmax_benchmark()], CPU, FAST)
    bad = bench.run([_softmax_benchmark(wrong=True)], CPU, FAST)
    reasons = {c.reason for c in bench.regressions(bench.compare(good, bad))}
    assert "result now wrong" in reasons


def _busy(seconds: float):
    def fn():
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass

    return fn


@pytest.mark.serial
def test_harness_median_matches_an_independent_timing_of_a_known_workload():
    """A 2 ms busy loop: the harness's median and a plain perf_counter loop, in one run, within 10%.

    The tests share 2 cores with another pytest worker, and a wall-clock spin that
    is preempted runs long; such a disturbed attempt (either timing) is measured
    again, up to three times, and the last attempt's figures are reported.
    """
    work = _busy(0.002)
    b = bench.Benchmark(
        name="busy",
        points=[{"n": 1}],
        inputs=lambda p, dev: (),
        candidates=lambda p: [bench.Candidate("busy", work, primary=True)],
        baseline="busy",
    )
    for _attempt in range(3):
        report = bench.run([b], CPU, bench.Settings(rounds=7, min_sample_s=0.02, warmup_s=0.05))
        rounds = []
        for _ in range(7):  # a plain perf_counter loop, summarised the same way (median of rounds)
            t0 = time.perf_counter()
            for _ in range(10):
                work()
            rounds.append((time.perf_counter() - t0) / 10)
        independent = sorted(rounds)[3]
        harness = report.results[0].candidates[0].time["median"]
        if harness == pytest.approx(independent, rel=0.10):
            break
    assert harness == pytest.approx(independent, rel=0.10)
    assert harness >= 0.002 * 0.99  # never faster than the loop itself (slower only when preempted)


def test_a_failing_baseline_is_reported_not_fatal():
    def boom(x):
        raise RuntimeError("not on this device")

    b = _softmax_benchmark()
    b.candidates = lambda p: [
        bench.Candidate("mine", lambda x: torch.softmax(x, -1), primary=True),
        bench.Candidate("broken", boom),
    ]
    report = bench.run([b], CPU, FAST)
    broken = report.results[0].candidate("broken")
    assert broken.error == "RuntimeError: not on this device" and broken.time is None


def test_cli_runs_a_suite_file_and_writes_the_report(tmp_path):
    suite = tmp_path / "toy.py"
    suite.write_text(
        "import torch\nfrom tpu_kernels import bench\n"
        "def benchmarks(quick, device_type):\n"
        "    return [bench.Benchmark(name='toy', points=[{'dtype': torch.float32}],\n"
        "        inputs=lambda p, dev: (torch.randn(32, 32, device=dev),),\n"
        "        candidates=lambda p: [bench.Candidate('mine', lambda x: x * 2, primary=True),\n"
        "                              bench.Candidate('torch', lambda x: x + x)],\n"
        "        reference=lambda x: 2 * x)]\n"
    )
    out = tmp_path / "out"
    assert main(["bench", str(suite), "--quick", "--out", str(out), "--rounds", "2"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["report.csv", "report.json", "summary.png", "toy.png"]
    report = Report.read_json(out / "report.json")
    assert report.settings["quick"] and report.results[0].candidates[0].check["passed"]

    suite.write_text(suite.read_text().replace("lambda x: x * 2", "lambda x: x * 3"))
    assert main(["bench", str(suite), "--quick", "--out", str(out), "--rounds", "2", "--no-plots"]) == 1


def test_cli_reports_unknown_suites(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bench").mkdir()
    assert main(["bench", "nope"]) == 2  # a user error: a message, not a traceback
    assert "no suite 'nope'" in capsys.readouterr().err


def test_kernel_benchmark_builds_the_standard_candidates():
    from tpu_kernels.kernels import softmax

    b = bench.kernel_benchmark(
        "softmax",
        softmax,
        inputs=lambda p, dev: (torch.randn(16, 128, device=dev),),
        points=[{"dtype": torch.float32}],
        reference=lambda x: torch.softmax(x, -1),
        quick=True,
    )
    names = [c.name for c in b.candidates(b.points[0])]
    assert names == ["tpu_kernels", "torch", "jax"]
    report = bench.run([b], CPU, FAST)
    point = report.results[0]
    assert all(c.check["passed"] for c in point.candidates)
    assert point.cost_source == "pallas CostEstimate" and point.flops == 5 * 16 * 128


def test_compiled_baseline_is_compiled_at_every_point_of_a_long_sweep():
    """Nine (shape, dtype) points: one shared compiled function would hit Dynamo's recompile
    limit (8) and silently run eagerly from then on; each point compiles its own, and the
    compiled graph count proves every one ran compiled. (Dynamo's "eager" backend keeps the
    test fast: what is under test is Dynamo's caching, not Inductor.)"""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    shapes = [(8 * i, 16) for i in range(1, 10)]
    bm = bench.Benchmark(
        name="long_sweep",
        points=bench.grid(shape=shapes, dtype=[torch.float32]),
        inputs=lambda p, dev: (torch.randn(*p["shape"], dtype=p["dtype"], device=dev),),
        candidates=lambda p: [
            bench.Candidate("eager", lambda x: torch.tanh(x) * 2, primary=True),
            bench.Candidate(
                "torch.compile", bench.compiled_baseline(lambda x: torch.tanh(x) * 2, backend="eager")
            ),
        ],
        reference=lambda x: torch.tanh(x) * 2,
    )
    before = counters["stats"]["unique_graphs"]
    settings = bench.Settings(rounds=1, min_sample_s=0.0005, warmup_s=0.01, warmup_calls=2)
    report = bench.run([bm], CPU, settings)
    assert len(report.results) == 9
    for point in report.results:
        compiled = point.candidate("torch.compile")
        assert compiled.error is None and not compiled.wrong, (point.point_id, compiled.error)
    assert counters["stats"]["unique_graphs"] - before == 9


def test_a_graph_break_in_a_compiled_baseline_is_an_error_not_a_timing():
    def breaks(x):
        torch._dynamo.graph_break()
        return x * 2

    bm = bench.Benchmark(
        name="breaks",
        points=bench.grid(shape=[(8, 16)], dtype=[torch.float32]),
        inputs=lambda p, dev: (torch.randn(*p["shape"], dtype=p["dtype"], device=dev),),
        candidates=lambda p: [
            bench.Candidate("eager", breaks, primary=True),
            bench.Candidate("torch.compile", bench.compiled_baseline(breaks, backend="eager")),
        ],
        reference=lambda x: x * 2,
    )
    report = bench.run([bm], CPU, bench.Settings(rounds=1, min_sample_s=0.0005, warmup_s=0.01))
    compiled = report.results[0].candidate("torch.compile")
    assert compiled.error and compiled.time is None


def test_without_a_terminal_each_finished_point_prints_one_line():
    import io

    from rich.console import Console

    from tpu_kernels.bench import console as bench_console

    out = io.StringIO()
    console = Console(file=out, width=200)
    assert not console.is_terminal
    progress = bench_console.progress_for(console)
    assert isinstance(progress, bench_console.LineProgress)
    bench.run([_softmax_benchmark()], CPU, FAST, progress=progress)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2  # two points
    assert "toy_softmax shape=64x128" in lines[0] and "mine " in lines[0] and "torch " in lines[0]


@pytest.mark.serial
def test_each_candidate_agrees_with_an_independent_loop_or_the_report_says_why():
    """For the shipped softmax op and torch's softmax: the harness's median against a plain
    perf_counter loop over the same callable and the same rotating inputs (figures printed).

    The cause of the old disagreement (1.2x to 2.8x for the tpu_kernels op) was the other
    candidate's spinning thread pool, now absorbed by each sample's untimed lead-in; on a quiet
    machine both candidates now agree within ~15% (bench/agreement.py, docs/benchmarking.md).
    The bound here is generous, 2x either way, because CI machines are noisy; the figures are
    printed. The harness also times one input set alone; where that differs by more than 10% the report carries a note naming the effect."""
    from tpu_kernels.kernels import softmax

    b = bench.Benchmark(
        name="agree",
        points=[{"shape": (256, 512)}],
        inputs=lambda p, dev: (torch.randn(*p["shape"], device=dev),),
        candidates=lambda p: [
            bench.Candidate("tpu_kernels", lambda x: softmax(x), primary=True),
            bench.Candidate("torch", lambda x: torch.softmax(x, -1)),
        ],
        reference=lambda x: torch.softmax(x, -1),
    )
    settings = bench.Settings(rounds=5, min_sample_s=0.01, warmup_s=0.2, max_input_sets=8)
    figures = {}
    for _attempt in range(3):
        report = bench.run([b], CPU, settings)
        point = report.results[0]
        sets = [b.inputs(point.point, torch.device("cpu")) for _ in range(point.input_sets)]
        ok = True
        for c in point.candidates:
            fn = {"tpu_kernels": lambda x: softmax(x), "torch": lambda x: torch.softmax(x, -1)}[c.name]
            for s in sets:  # warm: compiled, views cached
                fn(*s)
                fn(*s)
            rounds = []
            for _ in range(5):
                t0 = time.perf_counter()
                for i in range(c.calls_per_sample):
                    fn(*sets[i % len(sets)])
                rounds.append((time.perf_counter() - t0) / c.calls_per_sample)
            independent = sorted(rounds)[2]
            figures[c.name] = (c.median, independent, c.single_input_s, c.notes)
            ok &= 1 / 2 <= c.median / independent <= 2
            if abs(c.median / c.single_input_s - 1) > 0.10:
                assert c.notes and "a plain loop over one set" in c.notes[0]
        if ok:
            break
    print("harness / independent loop / one input set:", figures)
    for name, (harness, independent, _, _) in figures.items():
        assert 1 / 2 <= harness / independent <= 2, (name, figures)


def test_each_sample_starts_after_an_untimed_lead_in_of_its_own_candidate():
    """What one candidate leaves behind (torch's OpenMP workers spinning for milliseconds
    after a torch op, on CPU) must not be timed as the next candidate's: every timed sample
    is preceded by untimed calls of the same candidate."""
    from tpu_kernels.bench import timing

    log: list[str] = []

    def now() -> float:
        log.append("|")
        return float(len(log))

    def candidate(name):
        return lambda x: log.append(name)

    settings = bench.Settings(rounds=4, min_sample_s=0.0, warmup_s=0.0, warmup_calls=2, lead_in_s=1.0)
    sets = [(1,), (2,)]
    timings = timing.measure(
        CPU, {"a": (candidate("a"), sets), "b": (candidate("b"), sets)}, settings, now=now
    )
    assert [len(t.samples) for t in timings.values()] == [4, 4]
    warm_up = "||a||a|" + "||b||b|"  # a deadline, then two timed single calls; "|": a clock read
    rounds = "a|a|b|b|" + "b|b|a|a|" + "a|a|b|b|" + "b|b|a|a|"  # lead-in, then "|timed|"
    assert "".join(log) == warm_up + rounds
