"""The chip runner's figures on outputs and times that differ (issue 59).

Every figure of bench/reports/chip_v5e.json, and with it the README's headline and
docs/performance.md, comes from three places: the error of an output against float64
(`measure.normwise`, through each point's check), the speed against a baseline (`run._derive`,
per call and as calls in one program; `layer.measure_layer` for the decoder layer), and the
layer's gradient error against the XLA layer's. The runner's other tests (tests/test_chip.py)
feed near-correct outputs and equal times, where an error divided by the output's norm reads
the reference's figure and an inverted speed reads 1.0 either way. Here the outputs are scaled
or zero, the kernel is 2x faster and 2x slower, and one gradient is wrong by half.
"""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.test_chip import interleaving
from tpu_kernels.chip import grid, layer, measure, report, run
from tpu_kernels.chip.point import Point

ROOT = Path(__file__).resolve().parent.parent
REPORTS = ROOT / "bench" / "reports"
COMPILE_FN, IN_ONE_PROGRAM = measure.compile_fn, measure.in_one_program  # before any test stubs them


# ---- the error against float64 ------------------------------------------------------------------


def test_normwise_is_relative_to_the_reference_not_to_the_output():
    ref = np.random.default_rng(0).standard_normal((64, 128))
    assert measure.normwise(0.5 * ref, ref) == pytest.approx(0.5, rel=1e-12)  # by the output's norm: 1.0
    assert measure.normwise(2.0 * ref, ref) == pytest.approx(1.0, rel=1e-12)  # by the output's norm: 0.5
    assert measure.normwise(np.zeros_like(ref), ref) == 1.0  # by the output's norm: ||ref||
    assert measure.normwise(ref, ref) == 0.0
    assert 0 < measure.normwise(ref.astype(np.float32), ref) < 1e-7  # float32 rounding, in float64
    zero = np.zeros(4)
    assert measure.normwise(zero, zero) == 0.0  # an all-zero reference matched exactly
    assert measure.normwise(np.array([3.0, 4.0, 0.0, 0.0]), zero) == 5.0  # else the output's norm


def _one_point_per_kernel() -> list[Point]:
    """The quick grid's first point of each kernel (every kind of check the grid has), float32
    where it has one."""
    seen: dict[str, Point] = {}
    for p in sorted(grid.points(quick=True), key=lambda p: p.dtype != "f32"):
        seen.setdefault(p.kernel, p)
    return list(seen.values())


def test_each_points_check_reads_a_scaled_or_zero_output_at_its_error():
    """A point's check (its float64 host reference, through measure.normwise) given XLA's output
    at half scale reads 0.5, and an all-zero output 1.0: the error is relative to the float64
    reference, for every kernel's check (the forward and backward rows, matmul's sampled rows,
    attention's first head). XLA's own error e moves the half-scale figure by at most e / 2."""
    pts = _one_point_per_kernel()
    kernels = {p.kernel for p in pts}
    assert {
        "rmsnorm_backward",
        "softmax",
        "scale_add_backward",
        "matmul",
        "template.flash_attention_fwd_bwd",
    } <= kernels
    for p in pts:
        inputs = p.make(np.random.default_rng(0))
        out = jax.device_get(jax.jit(p.xla["xla"])(*inputs))
        e = p.check(inputs, out)
        assert e < 2e-2, p.id  # XLA: near-correct
        half = jax.tree.map(lambda a: np.asarray(a) * 0.5, out)  # exact in any float dtype
        zero = jax.tree.map(lambda a: np.zeros_like(np.asarray(a)), out)
        assert p.check(inputs, half) == pytest.approx(0.5, abs=e / 2 + 1e-12), p.id
        assert p.check(inputs, zero) == 1.0, p.id


# ---- the speed against a baseline ---------------------------------------------------------------


def _derived(times: dict[str, tuple[float, float | None]], floor_s: float = 1e-6) -> dict:
    """A row whose sides took `times` (side -> (per call, per call in one program or None)),
    through run._derive."""
    row: dict = {"bound": "bandwidth", "flops": 0, "bytes": 1e9}
    for side, (t, inside) in times.items():
        row[side] = {"time_s": t} | ({"time_in_program_s": inside} if inside is not None else {})
    run._derive(row, floor_s, None)
    return row


@pytest.mark.parametrize(
    "kernel_s, baseline_s, speed",
    [(1e-3, 2e-3, 2.0), (2e-3, 1e-3, 0.5), (3e-3, 3e-3, 1.0)],
    ids=["2x-faster", "2x-slower", "same"],
)
def test_speed_is_baseline_time_over_kernel_time(kernel_s, baseline_s, speed):
    """> 1: the kernel is faster. Against each baseline by its own time."""
    row = _derived(
        {"pallas": (kernel_s, None), "xla": (baseline_s, None), "jax_flash": (2 * baseline_s, None)}
    )
    assert row["speed_vs_xla"] == pytest.approx(speed, rel=1e-12)
    assert row["speed_vs_jax_flash"] == pytest.approx(2 * speed, rel=1e-12)
    assert "speed_in_program_vs_xla" not in row


@pytest.mark.parametrize(
    "kernel_s, baseline_s, speed", [(20e-6, 40e-6, 2.0), (40e-6, 20e-6, 0.5)], ids=["2x-faster", "2x-slower"]
)
def test_in_program_speed_is_baseline_time_over_kernel_time(kernel_s, baseline_s, speed):
    """A dispatch-bound point: per call both sides take the machine's dispatch (the same time);
    as calls in one program the kernel is 2x faster, or 2x slower."""
    row = _derived(
        {"pallas": (150e-6, kernel_s), "xla": (150e-6, baseline_s), "jax_flash": (300e-6, 2 * baseline_s)},
        floor_s=120e-6,
    )
    assert row["dispatch_bound"]
    assert row["speed_vs_xla"] == 1.0 and row["speed_vs_jax_flash"] == 2.0
    assert row["speed_in_program_vs_xla"] == pytest.approx(speed, rel=1e-12)
    assert row["speed_in_program_vs_jax_flash"] == pytest.approx(2 * speed, rel=1e-12)


def test_run_point_records_each_sides_time_error_and_speed(monkeypatch):
    """run_point end to end, with every timing stubbed: a dispatch-bound point whose kernel
    returns half the right answer, is 2x faster than XLA per call and 2x slower in one program.
    Its row holds each side's own figures: error 0.5 (the kernel) and 0 (XLA), speed 2.0 per
    call and 0.5 in program, and the in-program times per call (the program's time / n)."""
    n = measure.IN_PROGRAM_CALLS
    per_call = {"pallas": 150e-6, "xla": 300e-6}
    in_program = {"pallas": 40e-6, "xla": 20e-6}

    def kernel(x):  # half of 2x
        return x

    def xla(x):
        return x + x

    side = {kernel: "pallas", xla: "xla"}
    compiled_side: dict[int, tuple[str, bool]] = {}

    def in_one_program(fn, n=n):
        looped = IN_ONE_PROGRAM(fn, n)
        looped.side = side[fn]
        return looped

    def compile_fn(fn, args):
        compiled, seconds, error = COMPILE_FN(fn, args)
        looped_side = getattr(fn, "side", None)  # set by in_one_program above
        compiled_side[id(compiled)] = (looped_side or side[fn], looped_side is not None)
        return compiled, seconds, error

    def timed(compiled, args, *, rounds, sets=None, round_s=0.25):
        name, looped = compiled_side[id(compiled)]
        # a call's rounds: the fastest, and one 10% (pallas) or 30% (xla) slower
        return in_program[name] * n if looped else measure.Seconds.of([per_call[name], per_call[name] * spread[name]])

    spread = {"pallas": 1.1, "xla": 1.3}
    monkeypatch.setattr(measure, "compile_fn", compile_fn)
    monkeypatch.setattr(measure, "in_one_program", in_one_program)
    monkeypatch.setattr(measure, "timed", timed)
    monkeypatch.setattr(measure, "time_interleaved", interleaving(timed))
    monkeypatch.setattr(measure, "cross_program_prefetch", lambda compiled: False)

    def make(rng):
        return (rng.standard_normal((8, 128)).astype(np.float32),)

    def check(inputs, out):
        return measure.normwise(out, 2.0 * inputs[0].astype(np.float64))

    p = Point("p", "rows", "double", "f32", (8, 128), make, kernel, {"xla": xla}, check, flops=0, bytes=1)
    row = run.run_point(p, seed=0, rounds=1, floor_s=120e-6, peaks=None)
    assert row["pallas"]["error_vs_f64"] == pytest.approx(0.5, rel=1e-12)
    assert row["xla"]["error_vs_f64"] == 0.0
    assert row["dispatch_bound"] and row["in_program_calls"] == n
    for name in ("pallas", "xla"):
        assert row[name]["time_s"] == per_call[name]
        assert row[name]["spread"] == pytest.approx(spread[name] - 1, abs=1e-4)
        assert row[name]["time_in_program_s"] == pytest.approx(in_program[name], rel=1e-12)
    assert row["speed_vs_xla"] == pytest.approx(2.0, rel=1e-12)
    assert row["speed_in_program_vs_xla"] == pytest.approx(0.5, rel=1e-12)


def test_the_reports_speed_up_is_the_old_defaults_time_over_the_new():
    """docs/performance.md's before-and-after table: the speed-up of today's defaults over the
    old ones is the old time over the new (2 ms before, 1 ms after: 2.00x), beside the row's
    speed against XLA as recorded."""
    tune = {"tune": {"rows": [
        {"kernel": "matmul", "dtype": "bf16", "shape": [8, 8, 8], "statics": report.OLD_DEFAULTS["matmul"],
         "pallas": {"time_s": 2e-3}},
        {"kernel": "softmax", "dtype": "bf16", "shape": [8, 8], "statics": report.OLD_DEFAULTS["rows"],
         "pallas": {"time_s": 1e-3}},
    ]}}  # fmt: skip
    record = {"grid": {"rows": [
        {"kernel": "matmul", "dtype": "bf16", "shape": [8, 8, 8], "statics": {}, "pallas": {"time_s": 1e-3},
         "speed_vs_xla": 1.25},
        {"kernel": "softmax", "dtype": "bf16", "shape": [8, 8], "statics": {}, "pallas": {"time_s": 2e-3},
         "speed_vs_xla": 0.8},
    ]}}  # fmt: skip
    faster, slower = report.before_after(tune, record).splitlines()[2:]
    assert faster.endswith("| 2.00 ms | 1.00 ms | 2.00x | 1.25x |"), faster
    assert slower.endswith("| 1.00 ms | 2.00 ms | 0.50x | 0.80x |"), slower


# ---- the decoder layer: speed and gradient error ------------------------------------------------

DIMS = dict(tokens=16, d=32, heads=2, head_dim=16, ffn=64)


# The layer's pieces in plain JAX, as the kernels compute them: float32 inside, the input's
# dtype (bf16) out.
def _matmul(a, b):
    return jnp.dot(a, b, preferred_element_type=jnp.float32).astype(a.dtype)


def _rmsnorm(x, w):
    x32 = x.astype(jnp.float32)
    y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + 1e-6) * w.astype(jnp.float32)
    return y.astype(x.dtype)


def _attention(q, k, v):  # [1, heads, t, head_dim], causal
    q32, k32, v32 = (a.astype(jnp.float32) for a in (q, k, v))
    s = jnp.einsum("bhqd,bhkd->bhqk", q32, k32) / np.sqrt(q.shape[-1])
    t = q.shape[2]
    s = jnp.where(jnp.arange(t)[None, :] <= jnp.arange(t)[:, None], s, -jnp.inf)
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), v32).astype(q.dtype)


@jax.custom_vjp
def _rmsnorm_half_dw(x, w):
    return _rmsnorm(x, w)


def _half_dw_fwd(x, w):
    return _rmsnorm(x, w), (x, w)


def _half_dw_bwd(res, g):
    dx, dw = jax.vjp(_rmsnorm, *res)[1](g)
    return dx, 0.5 * dw  # the weight's gradient half what it should be; the input's right


_rmsnorm_half_dw.defvjp(_half_dw_fwd, _half_dw_bwd)


def _layer_row(monkeypatch, *, backward: bool, ours_ms: float, xla_ms: float, ours_rmsnorm=_rmsnorm) -> dict:
    """measure_layer at DIMS on the CPU, with plain-JAX pieces on both sides (ours may carry a
    wrong rmsnorm backward) and each side's time stubbed: the first compiled is ours."""
    monkeypatch.setattr(layer, "_kernels", lambda statics: (_matmul, ours_rmsnorm, _attention, None))
    monkeypatch.setattr(layer, "_xla_kernels", lambda: (_matmul, _rmsnorm, _attention))
    monkeypatch.setattr(layer, "_gated_down", lambda statics: (None, None))  # silu(g) * u, then _matmul; residuals after
    order: dict[int, str] = {}

    def compile_fn(fn, args):
        compiled, seconds, error = COMPILE_FN(fn, args)
        order[id(compiled)] = ("ours", "xla")[len(order)]
        return compiled, seconds, error

    def timed(compiled, args, *, rounds, sets=None, round_s=0.25):
        return {"ours": ours_ms, "xla": xla_ms}[order[id(compiled)]] * 1e-3

    monkeypatch.setattr(measure, "compile_fn", compile_fn)
    monkeypatch.setattr(measure, "timed", timed)
    monkeypatch.setattr(measure, "time_interleaved", interleaving(timed))
    monkeypatch.setattr(measure, "cross_program_prefetch", lambda compiled: False)
    return layer.measure_layer(DIMS, backward=backward, rounds=1, floor_s=1e-4, statics={})


@pytest.mark.parametrize(
    "ours_ms, xla_ms, speed", [(1.0, 2.0, 2.0), (2.0, 1.0, 0.5)], ids=["2x-faster", "2x-slower"]
)
def test_the_layers_speed_is_xla_time_over_ours(monkeypatch, ours_ms, xla_ms, speed):
    row = _layer_row(monkeypatch, backward=False, ours_ms=ours_ms, xla_ms=xla_ms)
    assert (row["ours_ms"], row["xla_ms"]) == (ours_ms, xla_ms)
    assert row["speed_vs_xla"] == speed
    # the same pieces on both sides: the same error, bf16's against the float64 layer
    assert row["error_ours_vs_f64"] == row["error_xla_vs_f64"] < 2e-2


def test_the_layers_gradient_error_is_the_worst_leaf_against_the_xla_layers(monkeypatch):
    """Every input's and weight's gradient is compared, each relative to the XLA layer's, and the
    worst one speaks: our rmsnorm's weight gradients at half scale (the input's gradient right)
    read 0.5 (1.0 relative to ours); the same layer on both sides reads about 0 (bf16 gradients,
    the same math: a rounding apart where XLA fuses the two graphs differently)."""
    right = _layer_row(monkeypatch, backward=True, ours_ms=1.0, xla_ms=1.0)
    assert right["ours_compiles"] and right["error_grads_ours_vs_xla"] < 1e-2
    wrong = _layer_row(monkeypatch, backward=True, ours_ms=1.0, xla_ms=1.0, ours_rmsnorm=_rmsnorm_half_dw)
    assert wrong["error_grads_ours_vs_xla"] == pytest.approx(0.5, abs=1e-2)
    assert (
        "error_ours_vs_f64" not in wrong
    )  # no float64 backward: the XLA layer's gradients are the reference


# ---- the committed records ----------------------------------------------------------------------


def _rows(record: dict) -> list[dict]:
    rows = list(record.get("rows", []))
    for value in record.values():
        if isinstance(value, dict) and isinstance(value.get("rows"), list):
            rows += value["rows"]
    return rows


@pytest.mark.parametrize(
    "name", ["chip_v5e.json", "chip_v5e_rows_probe.json", "chip_v5e_tune.json", "chip_v5e_drawn.json",
             "chip_v5e_layer_by_token.json"], ids=lambda n: n[:-5]
)
def test_every_recorded_speed_is_the_baseline_time_over_the_kernels(name):
    """What the README's headline and docs/performance.md render: each speed in the record is
    its baseline's recorded time over the kernel's (per call and in one program), never the
    inverse; the decoder layer's, XLA's milliseconds over ours."""
    speeds = 0
    for r in _rows(json.loads((REPORTS / name).read_text())):
        for key, value in r.items():
            if key.startswith("speed_in_program_vs_"):
                base = r[key.removeprefix("speed_in_program_vs_")]
                want = base["time_in_program_s"] / r["pallas"]["time_in_program_s"]
            elif key.startswith("speed_vs_") and "pallas" in r:
                want = r[key.removeprefix("speed_vs_")]["time_s"] / r["pallas"]["time_s"]
            elif key == "speed_vs_xla":  # a layer row
                want = r["xla_ms"] / r["ours_ms"]
                assert value == pytest.approx(want, abs=1e-3), (name, r["id"], key)
                speeds += 1
                continue
            else:
                continue
            assert value == pytest.approx(want, rel=1e-9), (name, r["id"], key)
            speeds += 1
    assert speeds >= 9


def _probe_us(rows: list[dict], **where) -> dict[str, float]:
    """side -> microseconds of the blocks probe's rows matching `where`."""
    return {r["side"]: r["us"] for r in rows if all(r.get(k) == v for k, v in where.items()) and "us" in r}


def test_the_blocks_probe_record_backs_the_defaults_it_moved():
    """The defaults the blocks probe moved (chip_v5e_blocks_probe.json) are the faster ones in it:
    the gated down projection at a whole-d block_n over matmul's 768 (qwen2.5-1.5b); the
    backward's widest dividing blocks over the powers of two, for the template (four shapes) and
    the family (by token); a float32 template forward's widest block_q."""
    rows = json.loads((REPORTS / "chip_v5e_blocks_probe.json").read_text())["rows"]
    gated = _probe_us(rows, section="gated", dims=[2560, 8960, 1536])
    assert gated["gated_default_512x768x1792"] > 1.1 * gated["gated_512x1536x896"]
    widest = {(3584, "f32"): 896, (3584, "bf16"): 896, (2560, "bf16"): 640, (1280, "bf16"): 640}
    powers = {3584: 512, 2560: 512, 1280: 256}
    for (seq, dt), w in widest.items():
        shape = [r["shape"] for r in rows if r.get("dtype") == dt and r["shape"][2] == seq][0]
        both = _probe_us(rows, section="template", dtype=dt, mode="fwd_bwd", shape=shape)
        p = powers[seq]
        assert both[f"template_{w}x{w}"] < both[f"template_{p}x{p}"], (seq, dt)
        if shape[3] % 128 == 0:
            assert both[f"family_by_token_{w}"] < both[f"family_by_token_{p}"], (seq, dt)
    f32 = _probe_us(rows, section="template", dtype="f32", mode="fwd", shape=[1, 8, 3584, 128])
    assert f32["template_896x512"] < f32["template_512x512"]
    assert f32["jax_flash_512"] / f32["template_896x512"] >= 0.9  # issue 58's bar for the template
