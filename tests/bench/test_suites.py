"""`tpu-kernels bench --quick` on the shipped suites (bench/*.py), as README's main job runs it,
and where the command finds suites."""

import json
from pathlib import Path

import pytest
import torch

from tests.registries import family_id, kernel_families, op_id, tokamax_ops
from tpu_kernels import bench
from tpu_kernels import tokamax as tk
from tpu_kernels.bench import discover
from tpu_kernels.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_from_an_empty_directory_the_shipped_suites_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert discover.suite_files(None) == discover.suite_files(None, root=ROOT)
    assert {p.stem for p in discover.suite_files(None)} >= {"kernels", "tokamax_ops"}
    assert discover.suite_files("kernels") == [ROOT / "bench" / "kernels.py"]


def test_a_project_of_ones_own_takes_its_bench_folder_first(tmp_path, monkeypatch):
    (tmp_path / "bench").mkdir()
    mine = tmp_path / "bench" / "mine.py"
    mine.write_text("def benchmarks(quick, device_type):\n    return []\n")
    monkeypatch.chdir(tmp_path)
    assert discover.suite_files(None) == [Path.cwd() / "bench" / "mine.py"]
    # a shipped suite is still found by name
    assert discover.suite_files("kernels") == [ROOT / "bench" / "kernels.py"]
    assert discover.suite_files(None, suites=ROOT / "bench") == discover.suite_files(None, root=ROOT)


def test_no_such_suite_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "no_such_suite"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no suite 'no_such_suite'" in err and "kernels" in err and len(err.splitlines()) == 1
    assert main(["bench", "--suites", str(tmp_path)]) == 2
    assert "no suites in" in capsys.readouterr().err


def _first(y):
    return y[0] if isinstance(y, (tuple, list)) else y  # rmsnorm also returns inv_rms


def _kernel_benchmarks(quick: bool) -> dict[str, bench.Benchmark]:
    return {b.name: b for b in discover.load(ROOT / "bench" / "kernels.py", quick=quick, device_type="cpu")}


def test_the_kernel_suite_has_one_benchmark_per_registered_family():
    assert list(_kernel_benchmarks(True)) == [f.op.short_name for f in kernel_families()]


@pytest.mark.parametrize("family", kernel_families(), ids=family_id)
def test_a_kernel_benchmark_takes_its_sizes_and_helion_twin_from_its_family(family):
    """kernel_suite derives the sweeps from the family's registration and shapes.py (BENCH,
    QUICK, REDUCED) and the "helion" candidate from the twin its registration names: a new BENCH size
    or a changed QUICK shows up in the suite without editing it."""
    shapes = family.shapes
    assert shapes.QUICK in shapes.BENCH
    floats = [torch.float32, torch.bfloat16]
    full = _kernel_benchmarks(False)[family.op.short_name]
    quick = _kernel_benchmarks(True)[family.op.short_name]
    assert list(full.points) == bench.grid(shape=list(shapes.BENCH.values()), dtype=floats)
    assert list(quick.sweep(True)) == bench.grid(shape=[shapes.BENCH[shapes.QUICK]], dtype=floats)
    # a CPU's default run: REDUCED, or every BENCH size for a family that names none
    reduced = [shapes.BENCH[n] for n in getattr(shapes, "REDUCED", tuple(shapes.BENCH))]
    assert list(full.sweep(reduced=True)) == bench.grid(shape=reduced, dtype=floats)
    [small, *_] = shapes.TEST.values()
    point = {"shape": small, "dtype": torch.float32}
    torch.manual_seed(0)
    xs = quick.inputs(point, torch.device("cpu"))
    cands = {c.name: c for c in quick.candidates(point)}
    assert {"tpu_kernels", "torch", "jax"} <= set(cands) and "torch.compile" not in cands
    kw = dict(family.kwargs)
    if family.helion:
        want = family.helion_op()(*xs, **kw)
        torch.testing.assert_close(_first(cands["helion"].fn(*xs)), _first(want), rtol=0, atol=0)
    else:
        assert "helion" not in cands
    # the op, its reference and the twin get the same keywords (scale_add: alpha=0.5)
    ref = quick.reference(*xs, **quick.reference_kwargs(point))
    torch.testing.assert_close(_first(cands["tpu_kernels"].fn(*xs)), _first(ref), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(_first(ref), _first(family.torch_reference(*xs, **kw)))


def _tokamax_suite():
    return discover.import_suite(ROOT / "bench" / "tokamax_ops.py")


@pytest.mark.parametrize("op", tokamax_ops(), ids=op_id)
def test_every_tokamax_op_has_a_benchmark(op):
    """Each registered Tokamax op is timed: by a case written in the suite, or else on its
    family's first small example call against its family's reference."""
    suite = _tokamax_suite()
    _, written = suite._written_benchmarks(True, "cpu")
    names = [b.name for b in suite.benchmarks(True, "cpu")]
    assert op.short_name in written or f"tokamax_{op.short_name}" in names


def test_an_op_without_a_written_case_is_timed_on_its_small_example_and_checked():
    suite = _tokamax_suite()
    _, written = suite._written_benchmarks(True, "cpu")
    rest = [(f, op) for f in tk.FAMILIES.values() for op in f.ops if op.short_name not in written]
    assert rest, "every op has a written case: pick another op for this test"
    family, op = rest[0]
    b = suite.example_benchmark(family, op, "cpu", quick=True)
    [point] = b.points
    xs = b.inputs(point, torch.device("cpu"))
    cands = {c.name: c for c in b.candidates(point)}
    assert set(cands) == {"tokamax", "torch"} and cands["tokamax"].primary
    torch.testing.assert_close(
        _first(cands["tokamax"].fn(*xs)), _first(b.reference(*xs)), rtol=1e-4, atol=1e-4
    )
    torch.testing.assert_close(_first(cands["torch"].fn(*xs)), _first(b.reference(*xs)))


def test_the_formulas_torch_compile_cannot_trace_have_no_compiled_baseline():
    """A baseline that only ever reports an error costs a compile attempt per run and says
    nothing: the default run of each NOT_COMPILED op has no torch.compile candidate; the others do."""
    suite = _tokamax_suite()
    benches = {b.name: b for b in suite.benchmarks(False, "cpu")}
    for name, b in benches.items():
        if not name.startswith("tokamax_"):
            continue
        cands = {c.name for c in b.candidates(b.sweep(reduced=True)[0])}
        compiled = name.removeprefix("tokamax_") not in suite.NOT_COMPILED
        assert ("torch.compile" in cands) == compiled, name
    assert {"tokamax_ragged_dot", "tokamax_ragged_dot_general"} <= set(benches)


@pytest.mark.slow
def test_quick_run_of_every_shipped_suite_writes_a_correct_report(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # an empty directory: the shipped suites run, the report lands here
    assert main(["bench", "--quick", "--rounds", "2", "--min-sample-ms", "2"]) == 0
    [out] = (tmp_path / "bench-results").iterdir()
    report = json.loads((out / "report.json").read_text())
    assert report["schema"] == "tpu_kernels.bench/1" and report["device"]["type"] == "cpu"
    names = {r["benchmark"] for r in report["results"]}
    suites = {p.stem for p in (ROOT / "bench").glob("*.py")}
    # every suite contributes (tokamax_ops.py's benchmarks are named per op)
    assert {f.op.short_name for f in kernel_families()} | {"overhead"} <= names
    assert any(n.startswith("tokamax_") for n in names) and "tokamax_ops" in suites
    for result in report["results"]:
        for cand in result["candidates"]:
            where = f"{result['benchmark']} {result['point_id']} {cand['name']}"
            assert cand["error"] is None, where
            assert cand["time"]["median"] > 0, where
            assert cand["check"] is None or cand["check"]["passed"], where
    header = (out / "report.csv").read_text().splitlines()[0]
    assert "benchmark" in header and "median" in header
    for name in [*names, "summary"]:
        png = out / f"{name}.png"
        assert png.exists() and png.stat().st_size > 1000, name
