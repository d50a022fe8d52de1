"""What the report says and draws: the rotation note in both directions, the WRONG cell, and
the plots' figures (inspected as matplotlib objects before they are saved)."""

import io

import matplotlib.pyplot as plt
import pytest
from matplotlib.container import BarContainer
from rich.console import Console

from tpu_kernels.bench import plots, runner
from tpu_kernels.bench.console import render, verdict
from tpu_kernels.bench.results import CandidateResult, PointResult, Report

MIB = 1 << 20


def test_the_rotation_note_says_slower_when_rotation_is_slower():
    note = runner.rotation_note(16, 64 * MIB, 32 * MIB, 692e-6, 452e-6, primary=False)
    assert note.startswith("16 rotating input sets (64 MiB in all, more than the 32 MiB last-level cache)")
    assert "692 us per call, 1.53x the 452 us of a plain loop over one set" in note
    assert "slower with rotation" in note and "faster" not in note


def test_the_rotation_note_never_blames_cold_caches_for_a_speed_up():
    """Issue 23 saw "takes 0.33x a plain loop ... (cold caches between calls)": rotation was
    faster, and the note explained it by what would make it slower."""
    note = runner.rotation_note(4, 8 * MIB, 32 * MIB, 150e-6, 452e-6, primary=True)
    assert "within the 32 MiB last-level cache" in note
    assert "150 us per call, 0.33x the 452 us of a plain loop over one set" in note
    assert "faster with rotation, which colder caches cannot explain (the cause was not measured)" in note
    assert "slower" not in note and "cold caches between calls" not in note
    assert note.endswith("each set's tensors also have their own cached views")  # the op under test


def test_off_the_cpu_the_note_names_no_cache():
    note = runner.rotation_note(2, 512 * MIB, None, 2e-3, 1e-3, primary=False)
    assert note.startswith("2 rotating input sets (512 MiB in all): 2 ms per call, 2.00x")
    assert "cache)" not in note.split(":")[0]


def test_a_wrong_cell_gives_the_error_as_a_multiple_of_the_allowance():
    assert verdict(None) == "-"
    assert "ok" in verdict({"passed": True, "ratio": 0.3})
    assert (
        verdict({"passed": False, "ratio": 312.0, "max_abs_err": 0.5})
        == "[bold red]WRONG[/] (3.1e+02x allowed)"
    )


def _cand(name: str, ms: float, speedup: float | None = None) -> CandidateResult:
    s = ms * 1e-3
    time = {"median": s, "p10": 0.9 * s, "p25": 0.95 * s, "p75": 1.05 * s, "p90": 1.2 * s, "cv": 0.1}
    return CandidateResult(name, time=time, speedup=speedup, check={"passed": True, "ratio": 0.1})


def _report() -> Report:
    """softmax: one point per dtype; matmul: three points; speed-ups from 0.25x to 1.6x (the
    range where the old ticks were at 0.5 and 1 only)."""
    report = Report(environment={}, device={"type": "cpu", "name": "test"}, settings={}, timer="wall")
    for dt in ("float32", "bfloat16"):
        r = PointResult(
            "softmax", {"shape": [1024, 1024], "dtype": dt}, f"shape=1024x1024,dtype={dt}", baseline="torch"
        )
        r.candidates = [
            _cand("tpu_kernels", 4.76, 0.25),
            _cand("torch", 0.692, 1.0),
            _cand("helion", 2.76, 0.3),
        ]
        report.results.append(r)
    for i, n in enumerate((512, 1024, 2048)):
        r = PointResult(
            "matmul", {"mkn": [n] * 3, "dtype": "float32"}, f"mkn={n}x{n}x{n},dtype=float32", baseline="torch"
        )
        r.candidates = [_cand("tpu_kernels", 8.0**i, 1.6), _cand("torch", 1.6 * 8.0**i, 1.0)]
        report.results.append(r)
    return report


def test_a_one_point_panel_is_a_labelled_bar_per_candidate():
    report = _report()
    fig = plots.benchmark_figure(report, "softmax", [r for r in report.results if r.benchmark == "softmax"])
    try:
        fig.canvas.draw()
        assert len(fig.axes) == 2  # a panel per dtype
        for ax in fig.axes:
            (bars,) = [c for c in ax.containers if isinstance(c, BarContainer)]
            assert len(bars) == 3
            assert [t.get_text() for t in ax.get_xticklabels()] == ["tpu_kernels", "torch", "helion"]
            assert {t.get_text() for t in ax.texts} == {"4.76 ms", "692 us", "2.76 ms"}  # each bar's median
            assert not [line for line in ax.get_lines() if line.get_marker() == "o"]  # no dots
            tops = sorted(b.get_y() + b.get_height() for b in bars)
            assert tops == pytest.approx([0.692, 2.76, 4.76])  # bars reach the medians (ms)
            assert len(_labelled_ticks(ax.yaxis)) >= plots.MIN_TICKS
    finally:
        plt.close(fig)


def test_several_points_are_lines_with_readable_ticks():
    report = _report()
    fig = plots.benchmark_figure(report, "matmul", [r for r in report.results if r.benchmark == "matmul"])
    try:
        fig.canvas.draw()
        (ax,) = fig.axes
        assert [line.get_label() for line in ax.get_lines()] == ["tpu_kernels", "torch"]
        assert not [c for c in ax.containers if isinstance(c, BarContainer)]
        assert len(_labelled_ticks(ax.yaxis)) >= plots.MIN_TICKS
    finally:
        plt.close(fig)


def _labelled_ticks(axis) -> list[str]:
    lo, hi = sorted(axis.get_view_interval())
    return [
        t.get_text()
        for t, loc in zip(axis.get_ticklabels(), axis.get_majorticklocs())
        if lo <= loc <= hi and t.get_text()
    ]


def test_the_summary_axis_has_round_labels_and_each_bar_its_value():
    fig = plots.summary_figure(_report())
    try:
        fig.canvas.draw()
        (ax,) = fig.axes
        labels = _labelled_ticks(ax.xaxis)
        assert "1" in labels and len(labels) >= plots.MIN_TICKS, labels
        assert [t.get_text() for t in ax.get_yticklabels()] == [
            "softmax: tpu_kernels",
            "softmax: helion",
            "matmul: tpu_kernels",
        ]
        assert [t.get_text().strip() for t in ax.texts] == ["0.25x", "0.30x", "1.60x"]
    finally:
        plt.close(fig)


@pytest.mark.parametrize("lo, hi", [(0.21, 1.92), (0.625, 2.56), (3.1, 4.4), (0.01, 300.0), (1e-6, 1e6)])
def test_log_ticks_are_round_and_enough_over_any_range(lo, hi):
    ticks = plots.log_ticks(lo, hi)
    assert all(lo <= t <= hi for t in ticks) and ticks == sorted(ticks)
    assert 2 <= len(ticks) <= plots.MAX_TICKS
    if hi / lo > 2:
        assert len(ticks) >= plots.MIN_TICKS, ticks
    assert all(len(f"{t:.3g}") <= 6 for t in ticks)  # plainly written


def test_plots_are_written_and_closed(tmp_path):
    plt.close("all")
    paths = plots.write(_report(), tmp_path)
    assert plt.get_fignums() == []  # each figure closed once saved, however many benchmarks
    assert [p.name for p in paths] == ["softmax.png", "matmul.png", "summary.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths)


def test_the_console_prints_the_note_with_its_figures_once():
    report = _report()
    c = report.results[0].candidates[1]
    c.single_input_s = 452e-6
    c.notes = [runner.rotation_note(16, 64 * MIB, 32 * MIB, 692e-6, 452e-6, primary=False)]
    out = io.StringIO()
    render(report, Console(file=out, width=200, color_system=None))
    lines = [line for line in out.getvalue().splitlines() if "note" in line and "rotating" in line]
    assert len(lines) == 1 and lines[0].count("452 us") == 1
