"""The chip runner's drawn points (tpu_kernels/chip/drawn.py): what a seed draws, and the cuts."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpu_kernels.chip import drawn

SEEDS = st.integers(0, 2**31 - 1)


def test_the_table_holds_twelve_public_configs_or_more():
    assert len(drawn.MODELS) >= 12 and len({m.name for m in drawn.MODELS}) == len(drawn.MODELS)
    for m in drawn.MODELS:
        assert min(m.hidden, m.ffn, m.heads, m.kv_heads, m.head_dim, m.vocab) > 0
        assert m.heads % m.kv_heads == 0, m.name  # GQA groups divide the query heads
    assert {m.head_dim for m in drawn.MODELS} >= {64, 128, 256}


@settings(max_examples=30, deadline=None)
@given(seed=SEEDS)
def test_a_seed_draws_eighty_points_or_more_the_same_every_time(seed):
    pts = drawn.build(seed)
    assert len(pts) >= 80
    assert [p.id for p in pts] == [p.id for p in drawn.build(seed)]
    assert len({p.id for p in pts}) == len(pts)
    kernels = {p.kernel for p in pts}
    assert kernels >= {"matmul", "rmsnorm", "rmsnorm_backward", "softmax", "softmax_backward",
                       "template.flash_attention", "template.flash_attention_fwd_bwd"}


@settings(max_examples=30, deadline=None)
@given(seed=SEEDS)
def test_draws_stay_in_their_ranges_and_cuts_within_the_caps(seed):
    for d in drawn.draws(seed):
        lo, hi = (1, drawn.PREFILL[1]) if d.kind != "attention" else drawn.PREFILL
        assert lo <= d.tokens <= hi, d
        shape, cut = drawn.shape_of(d)
        item = 2 if d.dtype == "bf16" else 4
        if d.kind == "matmul":
            t, k, n = shape
            assert 1 <= t <= d.tokens and 2 * t * k * n <= drawn.MAX_FLOPS
            assert max(t * k, k * n) * item <= drawn.MAX_OPERAND
            assert ("tokens" in cut) == (t != d.tokens)
        elif d.kind == "softmax":
            assert shape[0] * shape[1] * item <= drawn.MAX_OPERAND // 4
        elif d.kind == "attention":
            _, heads, seq, _ = shape
            assert heads <= drawn.ATTN_HEADS and seq <= drawn.ATTN_SEQ and seq % 128 == 0


def test_across_seeds_every_role_dtype_and_phase_is_drawn():
    """Decode (<= 256 tokens) and prefill matmuls, every role, both dtypes: over ten seeds."""
    ds = [d for seed in range(10) for d in drawn.draws(seed)]
    mm = [d for d in ds if d.kind == "matmul"]
    assert {d.role for d in mm} == set(drawn.ROLES)
    assert {d.dtype for d in ds} == {"bf16", "f32"}
    assert any(d.tokens <= 256 for d in mm) and any(d.tokens >= 512 for d in mm)
    assert {d.model for d in ds} == {m.name for m in drawn.MODELS}


def test_an_lm_head_past_the_operand_cap_is_split_as_tensor_parallelism_splits_it():
    d = drawn.Draw("matmul", "gemma-2-9b", "lm_head", 8192, "f32")  # 3584 x 256000 float32: 3.7 GB
    (t, k, n), cut = drawn.shape_of(d)
    assert cut["tp"] == 4 and n == 64000 and k == 3584
    assert t == int(drawn.MAX_FLOPS // (2 * k * n)) and cut["tokens"] == t


def test_three_layers_are_drawn_from_head_dim_128_configs():
    for seed in range(5):
        layers = drawn.layers(seed)
        assert len(layers) == 3 and len({l_["model"] for l_ in layers}) == 3
        for dims in layers:
            assert dims["head_dim"] == 128 and 1024 <= dims["tokens"] <= 4096 and dims["tokens"] % 512 == 0


def _row(kernel: str, speed: float | None, i: int, ran: bool = True) -> dict:
    base = "jax_flash" if kernel.startswith("template.flash") else "xla"
    row = {"id": f"p{i}", "kernel": kernel, "dtype": "bf16", "pallas": {"time_s": 1e-3} if ran else {}}
    if speed is not None:
        row[f"speed_vs_{base}"] = speed
    return row


@settings(max_examples=50, deadline=None)
@given(speeds=st.lists(st.floats(0.1, 5.0), min_size=1, max_size=40), failed=st.integers(0, 3),
       unmatched=st.integers(0, 3))
def test_the_summary_gives_min_p10_median_worst_and_failures(speeds, failed, unmatched):
    rows = [_row("matmul", s, i) for i, s in enumerate(speeds)]
    rows += [_row("matmul", None, 100 + i, ran=False) for i in range(failed)]
    rows += [_row("matmul", None, 200 + i) for i in range(unmatched)]
    s = drawn.summary(rows)["matmul/bf16"]
    assert s["points"] == len(speeds) + failed + unmatched and s["baseline"] == "xla"
    assert s["min"] == min(speeds) and math.isclose(s["median"], float(np.median(speeds)))
    assert math.isclose(s["p10"], float(np.percentile(speeds, 10)))
    assert [w["id"] for w in s["worst"]] == [f"p{i}" for i in np.argsort(speeds, kind="stable")[:3]]
    assert s["failed"] == [f"p{100 + i}" for i in range(failed)]
    assert s["unmatched"] == [f"p{200 + i}" for i in range(unmatched)]


def test_the_summary_keeps_dispatch_bound_points_apart():
    """The least speed of the points whose calls are the kernel's own time, and of the
    dispatch-bound ones as calls in one program, beside the per-call distribution."""
    rows = [_row("softmax", 0.6, 0), _row("softmax", 1.3, 1), _row("softmax", 1.1, 2)]
    rows[0].update(dispatch_bound=True, speed_in_program_vs_xla=1.2)
    rows[1].update(dispatch_bound=True)  # its in-program timing failed
    s = drawn.summary(rows)["softmax/bf16"]
    assert (s["min"], s["min_kernel_bound"], s["min_in_program"]) == (0.6, 1.1, 1.2)
    assert drawn.summary(rows[1:2])["softmax/bf16"]["min_kernel_bound"] is None


@pytest.mark.parametrize("kernel", ["template.flash_attention", "template.flash_attention_fwd_bwd"])
def test_attention_is_judged_against_jax_flash(kernel):
    assert drawn.summary([_row(kernel, 1.1, 0)])[f"{kernel}/bf16"]["baseline"] == "jax_flash"


# ---------------------------------------------------------------- the committed record
RECORD = Path(__file__).resolve().parents[1] / "bench" / "reports" / "chip_v5e_drawn.json"
# normwise against float64: one bf16 rounding; float32 sums. Dots at JAX's default precision are one
# bf16 MXU pass in either dtype (XLA's too: 2.4e-3 at float32 in this record), so their bound is bf16's.
TOLERANCE = {"bf16": 1e-2, "f32": 1e-5, "dot": 1e-2}


@pytest.fixture(scope="module")
def record():
    return json.loads(RECORD.read_text())


def test_the_record_is_the_draw_of_its_seed(record):
    """Every row is a point of `drawn.build(seed)` (its id, shape, model, role, drawn tokens and
    cuts), each once, and the rows cover 80 points or more of the 82 drawn."""
    meta, rows = record["meta"], record["drawn"]["rows"]
    assert meta["device_kind"] == "TPU v5 lite" and meta["platform"] == "tpu" and not meta["interpret"]
    pts = {p.id: p for p in drawn.build(meta["seed"])}
    assert len({r["id"] for r in rows}) == len(rows) and len(rows) >= 75
    for r in rows:
        p = pts[r["id"]]
        assert tuple(r["shape"]) == p.shape and r["kernel"] == p.kernel and r["dtype"] == p.dtype
        assert {k: r[k] for k in p.drawn} == {**p.drawn, "cut": r["cut"]} and r["cut"] == p.drawn["cut"]


def test_every_kernel_in_the_record_ran_and_matched_float64(record):
    """Each kernel within its dtype's bound of float64, and each matmul within 1.2x of XLA's own
    error at the same point."""
    for r in record["drawn"]["rows"]:
        assert r["pallas"]["compiles"] and "run_error" not in r["pallas"], r["id"]
        dots = r["kernel"] == "matmul" or r["kernel"].startswith("template.flash_attention")
        assert r["pallas"]["error_vs_f64"] < TOLERANCE["dot" if dots else r["dtype"]], r["id"]
        if r["kernel"] == "matmul":
            assert r["pallas"]["error_vs_f64"] <= 1.2 * r["xla"]["error_vs_f64"], r["id"]


def test_the_records_layers_are_drawn_layers_of_its_seed(record):
    """Each `drawn_layer` row is a config of `drawn.layers(seed)` at its drawn dims, forward or
    forward + backward, both sides compiled and run, the forward within bf16's error of float64."""
    rows = record.get("drawn_layer", {}).get("rows", [])
    assert rows, "the record has no drawn_layer rows"
    drawn_dims = {d.pop("model"): d for d in drawn.layers(record["meta"]["seed"])}
    for r in rows:
        assert r["seed"] == record["meta"]["seed"] and r["dims"] == drawn_dims[r["model"]], r["id"]
        assert r["ours_compiles"] and r["xla_compiles"] and "ours_run_error" not in r, r["id"]
        assert r["speed_vs_xla"] == pytest.approx(r["xla_ms"] / r["ours_ms"], abs=1e-3), r["id"]
        if not r["backward"]:
            assert r["error_ours_vs_f64"] < TOLERANCE["dot"], r["id"]


def test_the_drawn_sections_run_in_the_interpreter_without_torch(tmp_path):
    """`--sections drawn,drawn_layer --quick --interpret`: the draw's first point of each kind at
    the tiny config, and the tiny decoder layer, each compiled, run and checked, every row with
    its draw; the seed given is the record's."""
    from tests.test_chip import run_chip

    out_file = tmp_path / "drawn.json"
    out = run_chip(out_file, "--quick", "--interpret", "--sections", "drawn,drawn_layer", "--rounds", "1", "--seed", "7")
    assert out.returncode == 0, out.stderr[-3000:]
    record = json.loads(out_file.read_text())
    assert record["meta"]["seed"] == 7
    rows = record["drawn"]["rows"]
    assert {r["kernel"] for r in rows} >= {"matmul", "rmsnorm", "rmsnorm_backward", "softmax", "softmax_backward",
                                           "template.flash_attention", "template.flash_attention_fwd_bwd"}
    for r in rows:
        assert r["seed"] == 7 and r["model"] == "tiny" and r["pallas"]["compiles"], r["id"]
        assert r["pallas"]["error_vs_f64"] < TOLERANCE["dot" if r["kernel"] == "matmul" or "flash" in r["kernel"]
                                                     else r["dtype"]], r["id"]
    layers = record["drawn_layer"]["rows"]
    assert len(layers) == 2 and all(r["seed"] == 7 and r.get("speed_vs_xla") for r in layers)


def test_only_picks_the_drawn_layers_by_model_name():
    """`--only REGEX` re-measures some drawn layers (a run that ran out of device time left the
    others): the configs whose model name does not match are not measured at all."""
    from tpu_kernels.chip import sections

    ctx = sections.Context(peaks=None, floor_s=0.0, rounds=1, deadline=float("inf"), only="^no-such-model$",
                           seed=211739)
    assert sections.drawn_layer(ctx) == []


@settings(max_examples=5, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_the_tuning_sample_is_the_first_distinct_draws_of_each_kind(seed):
    """drawn.tune_sample: per kind, the first TUNE_SAMPLE draws with distinct shapes after the
    cuts and more than one candidate config, in draw order; the same every time from a seed. A
    draw passed over is a shape already picked, or one whose sweep has a single candidate."""
    groups = drawn.tune_sample(seed)
    assert [label for label, _ in groups] == [label for label, _ in drawn.tune_sample(seed)]
    ds = drawn.draws(seed)
    picked = [int(label.split("/")[0].removeprefix("drawn")) for label, _ in groups]
    assert picked == sorted(picked)
    kinds = [ds[i].kind for i in picked]
    assert {k: kinds.count(k) for k in drawn.TUNE_SAMPLE} == drawn.TUNE_SAMPLE
    def key(d):  # what makes two draws the same sweep: a matmul's role is not in its shape
        return d.kind, "" if d.kind == "matmul" else d.role, drawn.shape_of(d)[0], d.dtype

    for kind in drawn.TUNE_SAMPLE:
        mine = [i for i in picked if ds[i].kind == kind]
        assert len({key(ds[i]) for i in mine}) == len(mine)
        skipped = [i for i in range(mine[-1]) if ds[i].kind == kind and i not in mine]
        swept = {"rows": drawn.tune.row_sweep, "softmax": drawn.tune.row_sweep}
        for i in skipped:
            d = ds[i]
            if key(d) in {key(ds[j]) for j in mine if j < i}:
                continue
            assert kind in swept, (kind, i)  # a matmul or attention sweep always has a choice
            cands = [p for _, group in swept[kind]([(d.role, *drawn.shape_of(d)[0], d.dtype)]) for p in group]
            assert len({json.dumps(p.statics, sort_keys=True) for p in cands}) <= 1, i
    for label, cands in groups:
        assert len({json.dumps(p.statics, sort_keys=True) for p in cands}) > 1, label
        assert all(p.section == "drawn_tune" for p in cands)


@pytest.mark.slow
def test_the_tuning_sample_runs_in_the_interpreter_and_the_tuner_is_compared_with_it(tmp_path):
    """`--sections drawn_tune --quick --interpret`: one group per kind at the tiny config, every
    candidate compiled, run and checked against float64; then bench/chip_tuning.py --held-out
    compares the tuner's prediction (the constants in code, nothing fitted) with it per group."""
    from tests.bench.probes import load as load_bench_script
    from tests.test_chip import run_chip

    out_file = tmp_path / "drawn_tune.json"
    out = run_chip(out_file, "--quick", "--interpret", "--sections", "drawn_tune", "--rounds", "1", "--seed", "7")
    assert out.returncode == 0, out.stderr[-3000:]
    record = json.loads(out_file.read_text())
    rows = record["drawn_tune"]["rows"]
    assert len({r["group"] for r in rows}) == len(drawn.TUNE_SAMPLE)
    assert all(r["seed"] == 7 and r["pallas"]["compiles"] and r["pallas"]["error_vs_f64"] < 2e-2 for r in rows)
    script = load_bench_script("chip_tuning.py")
    fit = tmp_path / "held_out.json"
    assert script.main(["--record", str(out_file), "--section", "drawn_tune", "--held-out", "--json", str(fit)]) == 0
    doc = json.loads(fit.read_text())
    assert doc["section"] == "drawn_tune" and doc["seed"] == 7 and "fit" not in doc
    for run in doc["comparison"].values():
        assert run["summary"]["groups_predicted"] == len(drawn.TUNE_SAMPLE)
        assert all(g["choice_over_best"] >= 1.0 for g in run["groups"] if g.get("choice_over_best") is not None)


TUNING = RECORD.with_name("chip_v5e_drawn_tuning.json")


def test_the_tuners_choices_at_the_drawn_sample_are_this_scripts_output_and_within_its_goal(record):
    """bench/chip_tuning.py --held-out on the record's drawn_tune sweeps (the constants in code,
    nothing fitted): the committed comparison is this code's output from the record's own
    candidates, every group of the sample is in it, and the tuner's choice is within the goal
    (1.05x of the measured best) at >= 90% of them. A dispatch-bound group (every candidate
    timed in one program too) is compared in one program: per call it times the host."""
    from tests.bench.probes import load as load_bench_script
    from tpu_kernels.autotuner import predict

    doc = json.loads(TUNING.read_text())
    script = load_bench_script("chip_tuning.py")
    rows = record["drawn_tune"]["rows"]
    assert doc["seed"] == record["meta"]["seed"] and doc["section"] == "drawn_tune"
    assert doc["constants"] == {n: getattr(predict, n) for n in (*predict.FITTED, "VPU_OPS_PER_CYCLE")}
    assert {g["group"] for g in doc["candidates"]} == {r["group"] for r in rows}
    assert len({g["group"] for g in doc["candidates"]}) == sum(drawn.TUNE_SAMPLE.values())
    for name, declared in (("in code", False), ("in code, declared candidates", True)):
        got = json.loads(json.dumps(script.compare(doc["candidates"], doc["constants"], declared, True)))
        assert got == doc["comparison"][name]["groups"], name
    by_id = {(r["group"], r["kernel"], json.dumps(r["statics"], sort_keys=True)): r["pallas"] for r in rows}
    for g in doc["candidates"]:
        if not g["predicted"]:
            continue
        field = "time_in_program_s" if g["timed"] == "in one program" else "time_s"
        for c in g["candidates"]:
            assert c["measured_s"] == by_id[(g["group"], g["kernel"], json.dumps(c["statics"], sort_keys=True))].get(field)
    summary = doc["comparison"]["in code"]["summary"]
    assert summary["groups_predicted"] == sum(drawn.TUNE_SAMPLE.values())
    assert summary["within_goal"] >= 0.9 * summary["groups_predicted"]
    assert summary["choice_failed_on_chip"] == 0


def test_the_row_kernels_defaults_at_the_drawn_sample_are_within_five_percent_of_its_best(record):
    """At each rows group of the drawn tuning sample, the block the kernel takes by default
    (forward or backward: `Config.default`) ran within 1.05x of the group's fastest candidate,
    in one program where every candidate was timed there (a dispatch-bound shape), else per call:
    no v5e table entry is needed for them (issue 58, item 5)."""
    import jax.numpy as jnp

    from tpu_kernels.chip import load

    groups: dict = {}
    for r in record["drawn_tune"]["rows"]:
        if r["kernel"].split("_")[0] in ("rmsnorm", "softmax") and r["pallas"].get("time_s"):
            groups.setdefault((r["group"], r["kernel"]), []).append(r)
    assert len(groups) == 2 * (drawn.TUNE_SAMPLE["rows"] + drawn.TUNE_SAMPLE["softmax"])
    for (group, kernel), rows in groups.items():
        family = kernel.removesuffix("_backward")
        dtype = jnp.bfloat16 if rows[0]["dtype"] == "bf16" else jnp.float32
        default = load.family(family).pallas.Config.default(tuple(rows[0]["shape"]), dtype,
                                                             backward=kernel.endswith("_backward"))
        field = "time_in_program_s" if all(r["pallas"].get("time_in_program_s") for r in rows) else "time_s"
        times = {r["statics"]["block_rows"]: r["pallas"][field] for r in rows}
        assert default.block_rows in times, (group, kernel, default)
        assert times[default.block_rows] <= 1.05 * min(times.values()), (group, kernel, default, times)
