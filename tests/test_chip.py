"""The chip runner (`python -m tpu_kernels.chip`) on a machine without a TPU: its JAX halves
import where torch cannot, it runs its grid in Pallas' interpreter at small shapes, and the
committed chip records say what docs/performance.md says they say."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / "bench" / "reports" / "chip_v5e.json"
NO_TORCH = "import sys; sys.modules['torch'] = None\n"  # `import torch` raises from here on


def _python(code: str, timeout: float = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", NO_TORCH + code], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)


def run_chip(out_file, *args: str, timeout: float = 400) -> subprocess.CompletedProcess:
    """`python -m tpu_kernels.chip --out OUT_FILE ARGS...` in a process without torch, on JAX's CPU."""
    return _python("from tpu_kernels.chip.__main__ import main\n"
                   f"sys.exit(main({['--out', str(out_file), *args]!r}))\n", timeout=timeout)


def test_every_jax_half_and_pallas_template_imports_without_torch():
    out = _python(
        "from tpu_kernels.chip import load\n"
        "import tpu_kernels.chip.grid, tpu_kernels.chip.corpus, tpu_kernels.chip.sections\n"
        "import tpu_kernels.chip.layer, tpu_kernels.chip.report, tpu_kernels.chip.tune\n"
        "import tpu_kernels.runtime.mosaic_precision\n"
        "halves = [load.family(f) for f in load.families()]\n"
        "names = [(h.name, h.pallas.__name__, h.chip.SECTION, sorted(h.shapes.BENCH)) for h in halves]\n"
        "templates = [load.template(t).__name__ for t in load.template_names()]\n"
        "assert 'torch' not in {m.split('.')[0] for m in sys.modules if sys.modules[m] is not None}\n"
        "print(len(names), len(templates))\n"
    )
    assert out.returncode == 0, out.stderr[-3000:]
    # attention, linear_cross_entropy, matmul, rmsnorm, scale_add, softmax; four templates
    assert out.stdout.split() == ["6", "4"]


def test_the_runner_runs_its_grid_in_the_interpreter(tmp_path):
    """Every point of the quick grid compiles, runs and matches float64 within its dtype's
    rounding, and the report renders (the same code a TPU host runs, without torch)."""
    out_file = tmp_path / "chip.json"
    out = run_chip(out_file, "--quick", "--interpret", "--sections", "grid,precision", "--grid", "rows,matmul,attention,loss",
                   "--rounds", "1")
    assert out.returncode == 0, out.stderr[-3000:]
    record = json.loads(out_file.read_text())
    rows = record["grid"]["rows"]
    assert len(rows) >= 20
    for r in rows:
        assert r["pallas"]["compiles"] and "run_error" not in r["pallas"], r["id"]
        bound = 2e-2 if r["dtype"] == "bf16" else 1e-5
        assert r["pallas"]["error_vs_f64"] < bound, (r["id"], r["pallas"]["error_vs_f64"])
        assert r["xla"]["error_vs_f64"] < bound, (r["id"], "xla")
    precision = {(r["precision"], r["traced_with"]): r for r in record["precision"]["rows"]}
    assert set(precision) == {("default", "traced_at"), ("high", "traced_at"),
                              ("high", "jax.default_matmul_precision"), ("highest", "traced_at")}
    from tpu_kernels.chip import report

    assert report.grid_table(record).split("\n\n")[0].count("\n") == len(rows) + 1
    # a dispatch-bound point is timed again as calls in one program, every side with a time
    for r in rows:
        looped = {name for name in ("pallas", "xla") if "time_in_program_s" in r.get(name, {})}
        assert looped == ({"pallas", "xla"} if r["dispatch_bound"] else set()), r["id"]
        assert ("speed_in_program_vs_xla" in r) == r["dispatch_bound"]


@pytest.fixture(scope="module")
def record():
    return json.loads(RECORD.read_text())


def test_the_committed_record_is_a_v5e_run_where_every_grid_point_compiles(record):
    assert record["meta"]["device_kind"] == "TPU v5 lite" and record["meta"]["platform"] == "tpu"
    rows = record["grid"]["rows"]
    assert len(rows) >= 100
    assert all(r["pallas"]["compiles"] and "run_error" not in r["pallas"] for r in rows)
    kernels = {r["kernel"] for r in rows}
    assert {"rmsnorm", "rmsnorm_backward", "softmax", "softmax_backward", "scale_add", "scale_add_backward", "matmul",
            "template.flash_attention", "template.flash_attention_fwd_bwd"} <= kernels


def test_the_record_shows_every_setting_compiling_and_high_as_three_passes(record):
    # "high" the old way (JAX's setting around the whole trace) was refused by Mosaic ("Unsupported
    # dot precision: HIGH", the record at 453fcf7); the matmul kernel now computes it as three
    # bf16 passes (mosaic_precision.dot) whichever way it is traced
    rows = {(r["precision"], r["traced_with"]): r for r in record["precision"]["rows"]}
    assert all(r["pallas"]["compiles"] for r in rows.values())
    highest, default = rows["highest", "traced_at"], rows["default", "traced_at"]
    assert highest["pallas"]["error_vs_f64"] < 1e-6 and default["pallas"]["error_vs_f64"] > 1e-3
    for how in ("traced_at", "jax.default_matmul_precision"):
        high = rows["high", how]
        assert 1e-6 < high["pallas"]["error_vs_f64"] < high["xla"]["error_vs_f64"] < 2e-5
        assert high["pallas"]["time_s"] < 0.6 * highest["pallas"]["time_s"]
        assert high["speed_vs_xla"] >= 1.0


def test_the_matmul_defaults_are_the_sweeps_fast_configs():
    """The defaults the kernel takes at 4096^3 and 8192x4096x14336 bf16 are among the configs the
    v5e sweep measured within 5% of XLA there (bench/reports/chip_v5e_tune.json)."""
    from tpu_kernels.kernels.matmul import blocks

    tune = json.loads((ROOT / "bench" / "reports" / "chip_v5e_tune.json").read_text())["tune"]["rows"]
    for group, (m, k, n) in (("matmul/bf16[4096,4096,4096]", (4096, 4096, 4096)),
                             ("matmul/bf16[8192,4096,14336]", (8192, 4096, 14336))):
        bm, bn, bk = blocks.default(m, k, n, 2)
        rows = [r for r in tune if r["group"] == group]
        xla = next(r["xla"]["time_s"] for r in rows if "xla" in r)
        ours = next(r for r in rows if r["statics"] == {"block_m": bm, "block_n": bn, "block_k": bk})
        assert xla / ours["pallas"]["time_s"] >= 0.95, group


def test_a_later_run_replaces_only_the_points_it_measured(tmp_path):
    """`--update` (tpu_kernels/chip/records.py): a re-measured row replaces its old one in place,
    a new point (an id, or the same id at other statics) is appended, the other rows keep theirs, and every row names its commit."""
    from tpu_kernels.chip import records

    old = {"meta": {"commit": "aaa"}, "grid": {"commit": "aaa", "seconds": 5, "rows": [
        {"id": "x", "v": 1}, {"id": "y", "v": 2}]}}
    new = {"meta": {"commit": "bbb"}, "grid": {"commit": "bbb", "seconds": 1, "rows": [
        {"id": "y", "v": 3}, {"id": "z", "v": 4}, {"id": "x", "statics": {"block_rows": 8}, "v": 5}]}, "layer": {"commit": "bbb", "rows": [{"id": "l"}]}}
    into, source = tmp_path / "into.json", tmp_path / "new.json"
    into.write_text(json.dumps(old))
    source.write_text(json.dumps(new))
    merged = records.merge(into, source)
    assert [(r["id"], r.get("v"), r["commit"]) for r in merged["grid"]["rows"]] == [
        ("x", 1, "aaa"), ("y", 3, "bbb"), ("z", 4, "bbb"), ("x", 5, "bbb")]
    assert records.commits(merged) == {"aaa": 1, "bbb": 4}
    assert merged["meta"]["runs"][-1]["commit"] == "bbb" and json.loads(into.read_text()) == merged


def test_the_decoder_layer_runs_in_the_interpreter_and_its_gradients_match_xlas(tmp_path):
    """The runner's layer (forward, and forward + backward with each piece's own backward: the
    kernels through custom_vjp, matmul's the kernel reading its operands transposed, the FFN's down
    projection matmul's gated kernels, attention reading its heads in place, the residuals added
    in the projections' epilogues) at a small size."""
    out_file = tmp_path / "layer.json"
    out = _python(
        "from tpu_kernels.chip.__main__ import main\n"
        f"sys.exit(main(['--out', {str(out_file)!r}, '--quick', '--interpret', '--sections', 'layer', '--rounds', '1']))\n",
        timeout=400,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    rows = {r["backward"]: r for r in json.loads(out_file.read_text())["layer"]["rows"]}
    assert rows[False]["error_ours_vs_f64"] < 2e-2 and rows[False]["error_xla_vs_f64"] < 2e-2
    assert rows[True]["ours_compiles"] and rows[True]["error_grads_ours_vs_xla"] < 2e-2
    assert rows[False]["ffn_down"] == rows[True]["ffn_down"] == "swiglu_matmul"  # the gated kernels ran
    assert rows[False]["attention_layout"] == rows[True]["attention_layout"] == "by token"  # no transposes
    assert rows[False]["residual"] == rows[True]["residual"] == "in the epilogue"  # matmul_add, swiglu_matmul_add


def test_the_next_points_inputs_are_made_ahead_but_never_during_a_timed_call(monkeypatch):
    """`run_points` prepares the next point in a background thread (the grid's host work is
    most of its wall time); no preparation may overlap a timed call, and each point still
    gets the inputs of its own seed."""
    import threading
    import time

    import numpy as np

    from tpu_kernels.chip import measure, run
    from tpu_kernels.chip.point import Point

    events, lock = [], threading.Lock()

    def log(kind, start):
        with lock:
            events.append((kind, start, time.perf_counter()))

    def make(rng):
        start = time.perf_counter()
        time.sleep(0.05)
        x = rng.standard_normal((8, 128)).astype(np.float32)
        log("make", start)
        return (x,)

    def timed(compiled, args, *, rounds, sets=None):
        start = time.perf_counter()
        time.sleep(0.05)
        log("timed", start)
        return 1e-3

    monkeypatch.setattr(measure, "time_interleaved", interleaving(timed))
    seen = []

    def check(inputs, out):
        seen.append(float(inputs[0][0, 0]))
        return float(np.abs(np.asarray(out) - 2 * inputs[0]).max())

    pts = [Point(f"p{i}", "rows", "double", "f32", (8, 128), make, lambda x: 2 * x, {"xla": lambda x: x + x}, check,
                 flops=0, bytes=1) for i in range(4)]
    rows = run.run_points(pts, seed=7, peaks=None, floor_s=1e-4, log=lambda *_: None)
    assert [r["pallas"]["error_vs_f64"] for r in rows] == [0.0] * 4
    expect = [float(np.random.default_rng(7 + i).standard_normal((8, 128)).astype(np.float32)[0, 0]) for i in range(4)]
    assert seen == [e for e in expect for _ in range(2)]  # kernel and baseline, each point its own seed
    makes = [(a, b) for k, a, b in events if k == "make"]
    timings = [(a, b) for k, a, b in events if k == "timed"]
    assert len(makes) == 4 and len(timings) == 8
    for ta, tb in timings:
        for ma, mb in makes:
            assert mb <= ta or ma >= tb, "inputs were made during a timed call"
    assert all("make" in r["host_s"] and "check" in r["host_s"] for r in rows)


def test_a_sweeps_candidates_of_one_kernel_share_one_preparation_and_one_float64_reference():
    """`prepared(shared=True)` (a tuning sweep): each kind of point (kernel, dtype, shape) is made
    and put on the chip once, from its first candidate's seed; another kind gets its own; the
    candidates' checks meet the same host arrays, so a `reused` reference runs once per kind.
    Unshared, every point gets its own seed's inputs."""
    import numpy as np

    from tpu_kernels.chip import run
    from tpu_kernels.chip.point import Point, reused

    made, references = [], []

    def make(rng):
        x = rng.standard_normal((8, 128)).astype(np.float32)
        made.append(float(x[0, 0]))
        return (x,)

    def reference(kernel):  # each kernel its own float64 reference, as the families' are
        @reused
        def doubled64(x):
            references.append(kernel)
            return 2 * x.astype(np.float64)

        return doubled64

    def point(kernel, block, ref):
        return Point(f"{kernel}/b={block}", "rows", kernel, "f32", (8, 128), make, lambda x: 2 * x, {},
                     lambda inputs, out: float(np.abs(np.asarray(out) - ref(*inputs)).max()),
                     flops=0, bytes=1, statics={"block": block})

    refs = {kernel: reference(kernel) for kernel in ("fwd", "bwd")}
    pts = [point(kernel, block, refs[kernel]) for block in (8, 16, 32) for kernel in ("fwd", "bwd")]
    got = list(run.prepared(pts, range(10, 16), shared=True))
    inputs = [ready[0] for _, ready, _ in got]
    assert [p.id for p, _, _ in got] == [p.id for p in pts]
    assert all(inputs[i] is inputs[i % 2] for i in range(6)) and inputs[0] is not inputs[1]
    seed = [float(np.random.default_rng(s).standard_normal((8, 128)).astype(np.float32)[0, 0]) for s in (10, 11)]
    assert made == seed  # the first fwd's seed and the first bwd's, once each
    for (p, ready, _) in got:
        assert p.check(ready[0], 2 * ready[1][0]) == 0.0
    assert references == ["fwd", "bwd"]  # six checks, one float64 reference per kind

    made.clear()
    unshared = [ready[0] for _, ready, _ in run.prepared(pts, range(10, 16))]
    assert len({id(x) for x in unshared}) == 6 and len(made) == 6


def interleaving(timed):
    """A stand-in for measure.time_interleaved that times each side with `timed` (a test's own
    stand-in for measure.timed), one side after another."""

    def time_interleaved(compiled, args, *, rounds, sets=None, **kw):  # kw: round_s
        return {name: timed(c, args, rounds=rounds, sets=sets, **kw) for name, c in compiled.items()}

    return time_interleaved


def test_interleaved_sides_take_turns_round_by_round_and_a_failing_side_stops_alone():
    """measure.time_interleaved: every side's round r runs before any side's round r + 1 (so a
    slow spell of the host lands on each alike), each side's time is its fastest round with the
    rounds' spread, and a side whose call raises gets its exception while the others go on."""
    import jax.numpy as jnp

    from tpu_kernels.chip import measure

    order = []

    def side(name, fail_at=None):
        count = [0]

        def fn(a):
            count[0] += 1
            order.append(name)
            if fail_at is not None and count[0] >= fail_at:
                raise RuntimeError(f"{name} failed")
            return a

        return fn

    x = jnp.ones(3)
    got = measure.time_interleaved({"a": side("a"), "b": side("b"), "c": side("c", fail_at=3)}, [x], rounds=3,
                                   round_s=1e-9)
    assert isinstance(got["c"], RuntimeError) and "c failed" in str(got["c"])
    assert isinstance(got["a"], measure.Seconds) and isinstance(got["b"], measure.Seconds)
    assert got["a"].spread is not None and got["a"] > 0
    # each side: one sizing call and one warm-up call, then rounds of calls_for's least n (3)
    n = measure.calls_for(1.0, target_s=1e-9)
    timed = order[6:]
    assert timed == (["a"] * n + ["b"] * n + ["c"]) + (["a"] * n + ["b"] * n) * 2


def test_a_point_whose_work_is_under_twice_the_dispatch_floor_is_dispatch_bound():
    """The floor is a one-output trivial call's; a call with more buffers costs more per call
    (rmsnorm at 16 rows: 180-290 us, kernel and XLA alike), so a point is dispatch-bound when
    its measured time or its roofline time is under twice the floor."""
    from tpu_kernels.chip import run

    peaks = {"flops": 197e12, "hbm_bytes": 819e9}

    def row(t, nbytes):
        r = {"pallas": {"time_s": t}, "xla": {"time_s": t}, "bound": "bandwidth", "flops": 0, "bytes": nbytes}
        run._derive(r, 118e-6, peaks)
        return r

    tiny = row(285e-6, 512 * 1024)  # slower than 2x the floor, yet a microsecond of work
    assert tiny["dispatch_bound"] and tiny["roofline_s"] < 1e-6
    assert row(150e-6, 400e6)["dispatch_bound"]  # timed under 2x the floor
    big = row(700e-6, 400e6)  # 488 us of work at peak
    assert not big["dispatch_bound"] and abs(big["share_of_peak"] - 400e6 / 700e-6 / 819e9) < 1e-12


def test_copies_are_distinct_buffers_of_the_same_values_and_timing_cycles_through_them():
    """measure.copies: what a point with a cross-program prefetch is timed over; time_calls
    with `sets` calls the function with each in turn, a whole number of cycles per round."""
    import jax.numpy as jnp

    from tpu_kernels.chip import measure

    x = jnp.arange(8 * 128, dtype=jnp.float32).reshape(8, 128)
    y = jnp.ones((4,), jnp.bfloat16)
    sets = measure.copies([x, y])
    assert len(sets) == measure.ROTATE
    assert sets[0][0] is x and sets[0][1] is y
    pointers = {s[0].unsafe_buffer_pointer() for s in sets}
    assert len(pointers) == measure.ROTATE
    for s in sets:
        assert s[0].dtype == x.dtype and bool((s[0] == x).all()) and bool((s[1] == y).all())
    seen = []

    def fn(a, b):
        seen.append(a.unsafe_buffer_pointer())
        return a

    measure.time_calls(fn, [x, y], n=5, rounds=2, sets=sets)
    # one warm-up per set, then two rounds of 5 rounded up to 8 calls
    assert len(seen) == 4 + 16
    assert seen[:4] == [s[0].unsafe_buffer_pointer() for s in sets] and set(seen) == pointers


def test_a_time_is_the_fastest_round_and_carries_the_rounds_spread(monkeypatch):
    """measure.time_calls: the least per-call time over its rounds, and beside it their spread,
    (slowest - fastest) / fastest, which run_point records per side (`spread`)."""
    import jax.numpy as jnp

    from tpu_kernels.chip import measure

    rounds = iter([0.0, 2.0, 6.0, 9.0])  # perf_counter at each round's start and end: 2 s, then 3 s
    monkeypatch.setattr(measure.time, "perf_counter", lambda: next(rounds))
    t = measure.time_calls(lambda a: a, [jnp.ones(3)], n=1, rounds=2)
    assert t == 2.0 and t.spread == 0.5
    assert measure.Seconds.of([3e-6]).spread is None


def test_a_point_with_a_cross_program_prefetch_is_timed_over_copies_on_every_side(monkeypatch):
    """run_point: where any side's compiled module carries a cross-program prefetch, every side
    is timed cycling through the copies, and the same-input time is kept beside it."""
    import numpy as np

    from tpu_kernels.chip import measure, run
    from tpu_kernels.chip.point import Point

    calls = []

    def timed(compiled, args, *, rounds, sets=None):
        calls.append(sets)
        return 2e-3 if sets is not None else 1e-3

    marked = set()

    def prefetch(compiled):
        return id(compiled) in marked

    real_compile = measure.compile_fn

    def compile_fn(fn, args):
        compiled, s, err = real_compile(fn, args)
        if fn is xla:
            marked.add(id(compiled))
        return compiled, s, err

    monkeypatch.setattr(measure, "time_interleaved", interleaving(timed))
    monkeypatch.setattr(measure, "cross_program_prefetch", prefetch)
    monkeypatch.setattr(measure, "compile_fn", compile_fn)

    def xla(x):
        return x + x

    def make(rng):
        return (rng.standard_normal((8, 128)).astype(np.float32),)

    def check(inputs, out):
        return float(np.abs(np.asarray(out) - 2 * inputs[0]).max())

    p = Point(
        "p", "rows", "double", "f32", (8, 128), make, lambda x: 2 * x, {"xla": xla}, check, flops=0, bytes=1
    )
    row = run.run_point(p, seed=0, rounds=1, floor_s=1e-6, peaks=None)
    assert row["rotated"] == measure.ROTATE
    assert row["xla"]["cross_program_prefetch"] and not row["pallas"]["cross_program_prefetch"]
    for side in ("pallas", "xla"):
        assert row[side]["time_s"] == 2e-3 and row[side]["time_same_inputs_s"] == 1e-3
    assert [len(c) if c else None for c in calls] == [measure.ROTATE] * 2 + [None] * 2  # copies, then same inputs
    # none marked: one same-input timing per side, as before
    marked.clear()
    monkeypatch.setattr(measure, "compile_fn", real_compile)
    calls.clear()
    row = run.run_point(p, seed=0, rounds=1, floor_s=1e-6, peaks=None)
    assert "rotated" not in row and calls == [None, None]
    assert "time_same_inputs_s" not in row["xla"]


def test_the_record_cycles_inputs_exactly_where_a_side_prefetches_across_calls(record):
    """Every row of the record says, per side, whether XLA compiled a cross-program prefetch
    into it; a row is timed over input copies iff one side has one, and then keeps each side's
    same-input time. At the decode shapes that is what separates the two timings: XLA's dot
    same-input is far faster than cycled (part of the weight stays on chip), the kernel's not."""
    for r in record["grid"]["rows"] + record["precision"]["rows"]:
        sides = [k for k in ("pallas", "xla", "jax_flash") if "time_s" in r.get(k, {})]
        flags = [r[k]["cross_program_prefetch"] for k in sides]
        assert bool(r.get("rotated")) == any(flags), r["id"]
        if r.get("rotated"):
            assert r["rotated"] == 4 and all("time_same_inputs_s" in r[k] for k in sides), r["id"]
    rows = {r["id"]: r for r in record["grid"]["rows"]}
    for shape in ("16,4096,14336", "64,14336,4096"):
        r = rows[f"matmul/bf16[{shape}]"]
        assert r["xla"]["time_same_inputs_s"] < 0.7 * r["xla"]["time_s"]
        assert abs(r["pallas"]["time_same_inputs_s"] / r["pallas"]["time_s"] - 1) < 0.05
        assert r["speed_vs_xla"] > 1.0


def test_the_grid_holds_the_attention_family_and_the_fused_loss_at_their_chip_shapes():
    """Each family's `shapes.CHIP` (beside its TEST and BENCH shapes) is the runner's grid for
    it: the attention family forward and forward + backward (bf16, and the first shape in
    float32), with JAX's flash attention only where a block divides the sequence; the fused
    loss forward and forward + backward against XLA's unfused head."""
    from tpu_kernels.chip import grid as runner_grid
    from tpu_kernels.chip import load

    grid = runner_grid.points(sections=("attention", "loss"))
    ids = {p.id for p in grid}
    for b, h, hk, s, _, d in load.family("attention").shapes.CHIP.values():
        for kind in ("attention", "attention_fwd_bwd"):
            (p,) = [p for p in grid if p.id == f"{kind}/bf16[{b},{h},{hk},{s},{d}]/causal"]
            assert ("jax_flash" in p.xla) == (s % 128 == 0) and "xla" in p.xla, p.id
    assert sum(i.startswith("attention") and "/f32[" in i for i in ids) == 2
    for t, d, v in load.family("linear_cross_entropy").shapes.CHIP.values():
        assert {f"linear_cross_entropy/bf16[{t},{d},{v}]", f"linear_cross_entropy_fwd_bwd/bf16[{t},{d},{v}]"} <= ids
    assert {p.section for p in grid} == {"attention", "loss"}


TOY_PALLAS = """
import jax
from jax.experimental import pallas as pl


def _kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2


def double(x):
    return pl.pallas_call(_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
"""
TOY_REFERENCE = "def double_jax(x):\n    return x * 2\n"
TOY_SHAPES = "BENCH = {'small': (8, 128)}\nCHIP = [(64, 512)]\nCHIP_QUICK = [(8, 128)]\n"
TOY_CHIP = """
from tpu_kernels.chip.point import Point, err, f64, randn

SECTION = "rows"


def points(h, shapes, dtypes, statics):
    made = []
    for rows, d in shapes:
        for dt in dtypes:
            def make(rng, rows=rows, d=d, dt=dt):
                return (randn(rng, (rows, d), dt),)

            def check(inputs, out):
                return err(out, 2 * f64(inputs[0]))

            made.append(Point(f"toy_double/{dt}[{rows},{d}]", SECTION, "toy_double", dt, (rows, d), make,
                              h.pallas.double, {"xla": h.jax_reference.double_jax}, check, rows * d, 4 * rows * d))
    return made


def grid(h, *, quick, statics):
    return points(h, h.shapes.CHIP_QUICK if quick else h.shapes.CHIP, ("f32",), statics)
"""


def test_a_family_added_as_one_folder_joins_the_runners_grid(tmp_path, monkeypatch):
    """Adding a family to the chip runner touches its own folder: a toy family (pallas.py,
    jax_reference.py, shapes.py and chip.py) in a folder on the `tpu_kernels.kernels` package's
    path is one of `load.families()`, and its points join its section of the grid, whose
    float64 check passes on its interpreted kernel."""
    import numpy as np
    from jax.experimental.pallas import tpu as pltpu

    import tpu_kernels.kernels as kernels
    from tpu_kernels.chip import grid, load

    folder = tmp_path / "toy_double"
    folder.mkdir()
    for name, text in (
        ("pallas", TOY_PALLAS),
        ("jax_reference", TOY_REFERENCE),
        ("shapes", TOY_SHAPES),
        ("chip", TOY_CHIP),
    ):
        (folder / f"{name}.py").write_text(text)
    monkeypatch.setattr(kernels, "__path__", [*kernels.__path__, str(tmp_path)])
    for module in [m for m in sys.modules if m.startswith("tpu_kernels.kernels.toy_double")]:
        monkeypatch.delitem(sys.modules, module)
    try:
        assert "toy_double" in load.families()
        rows = grid.points(quick=True, sections=("rows",))
        (toy,) = [p for p in rows if p.kernel == "toy_double"]
        assert toy.id == "toy_double/f32[8,128]" and {"rmsnorm", "softmax", "scale_add"} <= {
            p.kernel for p in rows
        }
        assert not [p for p in grid.points(quick=True, sections=("matmul",)) if p.kernel == "toy_double"]
        inputs = toy.make(np.random.default_rng(0))
        with pltpu.force_tpu_interpret_mode(True):
            assert toy.check(inputs, toy.pallas(*inputs)) == 0.0
    finally:
        for module in [m for m in sys.modules if m.startswith("tpu_kernels.kernels.toy_double")]:
            del sys.modules[module]


TOY_TORCH_PALLAS = """
from dataclasses import dataclass

import jax
from jax.experimental import pallas as pl

from tpu_kernels.kernels._config import BlockConfig


@dataclass(frozen=True)
class Config(BlockConfig):
    block_rows: int | None = None
    SPACE = {"block_rows": [8, 16, 32]}

    @classmethod
    def default(cls, shape, dtype):
        return cls(shape[0])


def _kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2


def double(x: jax.Array, *, block_rows: int | None = None) -> jax.Array:
    rows = Config.default(x.shape, x.dtype).block_rows if block_rows is None else block_rows
    spec = pl.BlockSpec((rows, x.shape[1]), lambda i: (i, 0))
    return pl.pallas_call(_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(x.shape[0] // rows,),
                          in_specs=[spec], out_specs=spec)(x)
"""
TOY_TORCH_REFERENCE = """
from tpu_kernels.verification.tolerance import Reference


def double(x):
    return x * 2


CHECK = Reference(double)
"""
TOY_TORCH_INIT = """
from tpu_kernels.kernels import registry
from tpu_kernels.kernels.toy_double import pallas, reference, shapes
from tpu_kernels.op import tpu_kernel

double = tpu_kernel("toy_family_test::double", backward="vjp", tune=pallas.Config.space())(pallas.double)

registry.register(__name__, op=double, inputs=lambda s, dtype, device: (registry.randn(s, dtype, device),))
"""


@pytest.mark.slow
def test_a_family_added_as_one_folder_is_an_op_the_tuner_and_the_runner_see(tmp_path):
    """The whole family in one folder (its torch op and registration too): discovered as the
    package discovers its own, it is a registered family whose op runs, whose declared space
    (its `pallas.Config`, the op's `tune=`) is the tuner's candidates, and whose points join
    the runner's grid. In a process of its own: a torch op cannot be unregistered."""
    folder = tmp_path / "toy_double"
    folder.mkdir()
    shapes = "TEST = {'small': (16, 128)}\n" + TOY_SHAPES.replace("BENCH = {'small': (8, 128)}", "BENCH = {'small': (32, 128)}\nQUICK = 'small'")
    for name, text in (
        ("pallas", TOY_TORCH_PALLAS),
        ("jax_reference", TOY_REFERENCE),
        ("reference", TOY_TORCH_REFERENCE),
        ("shapes", shapes),
        ("chip", TOY_CHIP),
        ("__init__", TOY_TORCH_INIT),
    ):
        (folder / f"{name}.py").write_text(text)
    code = f"""
import json
import torch
import tpu_kernels.kernels as kernels
from tpu_kernels import wiring
from tpu_kernels.autotuner.point import candidates_for
from tpu_kernels.chip import grid
from tpu_kernels.kernels.registry import FAMILIES

kernels.__path__.append({str(tmp_path)!r})
wiring.discover("tpu_kernels.kernels", [{str(tmp_path)!r}])
family = FAMILIES["toy_double"]
x = torch.randn(32, 128)
out = {{
    "families": sorted(FAMILIES),
    "space": family.op.tunables.space(),
    "candidates": candidates_for(family.op, {{}}),
    "fixed": candidates_for(family.op, {{"block_rows": 16}}),
    "exact": bool(torch.equal(family.op(x, block_rows=16), 2 * x)),
    "points": [p.id for p in grid.points(quick=True, sections=("rows",)) if p.kernel == "toy_double"],
}}
print(json.dumps(out))
"""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert "toy_double" in got["families"] and {"matmul", "rmsnorm"} <= set(got["families"])
    assert got["space"] == {"block_rows": [None, 8, 16, 32]}  # the default (the kernel sizes it) first
    assert got["candidates"] == [[None], [8], [16], [32]] and got["fixed"] == [[16]]
    assert got["exact"] and got["points"] == ["toy_double/f32[8,128]"]
