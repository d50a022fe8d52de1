"""The cost model against a TPU v5e: the constants in autotuner/predict.py are the ones the committed
fit record (bench/reports/chip_v5e_tuning_fit.json, by bench/chip_tuning.py) says were fitted,
and the measured v5e matmul table committed beside the kernel loads through the lookup."""

import copy
import json

import jax
import jax.numpy as jnp
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tpu_kernels.autotuner import predict
from tpu_kernels.kernels import matmul
from tpu_kernels.tunables import lookup

from ..helpers import ROOT, load_bench_script

FIT = json.loads((ROOT / "bench/reports/chip_v5e_tuning_fit.json").read_text())
TABLE = ROOT / "tpu_kernels/kernels/matmul/tpu_kernels.matmul.tuning.json"


@pytest.mark.parametrize("name", (*predict.FITTED, "VPU_OPS_PER_CYCLE"))
def test_the_cost_models_constants_are_the_fitted_ones(name):
    assert getattr(predict, name) == FIT["constants"]["fitted"][name], (
        f"predict.{name} differs from bench/reports/chip_v5e_tuning_fit.json; rerun bench/chip_tuning.py"
    )
    # the comparison ran with them
    assert FIT["constants"]["in_code"][name] == FIT["constants"]["fitted"][name]


def test_the_record_states_the_fit_and_its_residuals():
    fit = FIT["fit"]
    for part in ("rows", "matmul"):  # the fit lowered the residual it was fitted on
        assert fit["rms_log_error"][part] < fit["rms_log_error_before"][part]
    assert FIT["float32"]["FLOAT32_MXU_FRACTION"] == FIT["constants"]["fitted"]["FLOAT32_MXU_FRACTION"]
    assert fit["DISPATCH_FLOOR_S"] == FIT["constants"]["fitted"]["DISPATCH_FLOOR_S"] > 0  # the record's own
    runs = FIT["comparison"]
    summary = runs["fitted"]["summary"]
    assert summary["choice_failed_on_chip"] == 0 and summary["kept_but_refused_by_chip"] == 0
    for among in ("", ", declared candidates"):  # the model now chooses no worse than the one before
        assert (
            runs[f"fitted{among}"]["summary"]["within_goal"]
            >= runs[f"before{among}"]["summary"]["within_goal"]
        )


def test_a_matmul_candidates_prediction_is_the_records():
    """predict_config on ShapeDtypeStructs gives what the record says for one of its candidates:
    the record is the output of this code, not of an older model."""
    from tpu_kernels.autotuner.point import predict_config

    group = next(g for g in FIT["candidates"] if g["group"] == "matmul/bf16[2048,2048,2048]")
    cand = next(
        c for c in group["candidates"] if c["statics"] == {"block_k": 512, "block_m": 1024, "block_n": 1024}
    )
    a = jax.ShapeDtypeStruct((2048, 2048), jnp.bfloat16)
    c = predict_config(matmul, (a, a), cand["statics"], "v5e")
    assert c.status == "predicted"
    for k in ("compute_s", "memory_s", "vector_s", "prologue_s", "steps"):
        assert getattr(c.prediction, k) == pytest.approx(cand["parts"][k], rel=1e-9)


@pytest.mark.parametrize(
    "m,k,n", [(2048, 2048, 2048), (4096, 4096, 4096), (8192, 4096, 14336), (16, 4096, 14336)]
)
def test_the_measured_v5e_matmul_table_is_served_on_a_v5e(m, k, n):
    args = (
        torch.empty(m, k, dtype=torch.bfloat16, device="meta"),
        torch.empty(k, n, dtype=torch.bfloat16, device="meta"),
    )
    tuned = matmul.tuned
    assert TABLE in tuned.paths()
    # read with the declared candidates' types checked
    entries = lookup.entries_for(matmul.name, tuned.paths())
    shapes, dtypes, bucket = tuned.key_of(args, {})
    entry, how = tuned.current(entries, "v5e", dtypes, bucket, matmul.signature.bind(args, {}))
    assert how == "exact" and entry is not None  # and its program digest is the kernel's now
    assert (
        entry.source == "measured"
        and entry.evidence["method"]["record"] == "bench/reports/chip_v5e_tune.json"
    )
    assert all(tuned.tunables.check_value(name, v) for name, v in entry.config.items())
    times = {json.dumps(c["config"], sort_keys=True): c["median_s"] for c in entry.evidence["candidates"]}
    assert times[json.dumps(dict(entry.config), sort_keys=True)] == min(times.values())


def test_the_records_fit_and_comparisons_are_this_scripts_output():
    """bench/chip_tuning.py run on the record's own candidates gives the record's fit (the
    constants and their residuals, least squares in log time) and each comparison's groups
    (each predicted choice's measured time over the best, ties broken as the tuner breaks
    them) and summary: the record is this code's output, not an older fit's."""
    script = load_bench_script("chip_tuning")
    assert script.fit(FIT["candidates"], FIT["fit"]["DISPATCH_FLOOR_S"]) == FIT["fit"]
    for name, run in FIT["comparison"].items():
        rows = script.compare(FIT["candidates"], run["constants"], run["declared_only"], run["cost_model"])
        assert rows == run["groups"], name
        assert script.summary(rows) == run["summary"], name
        assert all(r["choice_over_best"] >= 1.0 for r in rows if r.get("choice_over_best") is not None), name


def test_float32s_share_of_the_mxu_is_bf16_time_over_float32_time():
    """FLOAT32_MXU_FRACTION from the grid record: the bf16 matmul's time over the float32 one's
    at "highest" (six bf16 passes: about a sixth), never the inverse. Within 2% of the fit
    record's value: the grid record may be measured again without a new fit."""
    script = load_bench_script("chip_tuning")
    got = script.float32_fraction(script.GRID)
    assert got["from"] == FIT["float32"]["from"]
    assert got["FLOAT32_MXU_FRACTION"] == pytest.approx(got["bf16_s"] / got["f32_s"], abs=1e-3)
    assert got["FLOAT32_MXU_FRACTION"] == pytest.approx(FIT["float32"]["FLOAT32_MXU_FRACTION"], rel=0.02)
    assert 0.1 < got["FLOAT32_MXU_FRACTION"] < 0.5


@settings(max_examples=4, deadline=None)
@given(
    step_us=st.integers(5, 150).map(lambda n: n / 100),
    hbm=st.integers(50, 100).map(lambda n: n / 100),
    mxu=st.integers(50, 100).map(lambda n: n / 100),
)
def test_the_fit_recovers_constants_that_made_the_times(step_us, hbm, mxu):
    """bench/chip_tuning.py's fit, on the record's candidates with times made by known constants
    (on its grid; the record's dispatch floor and vector rate): it finds them, so a fitted value
    is the data's and not the procedure's."""
    script = load_bench_script("chip_tuning")
    fixed = FIT["constants"]["fitted"]
    truth = {
        **fixed,
        "STEP_OVERHEAD_S": round(step_us * 1e-6, 9),
        "HBM_EFFICIENCY": hbm,
        "MXU_EFFICIENCY": mxu,
    }
    groups = copy.deepcopy(FIT["candidates"])
    for g in groups:
        for c in g.get("candidates", []) if g["predicted"] else []:
            if "parts" in c:
                c["measured_s"] = script.seconds(c["parts"], truth)
    fit = script.fit(groups, fixed["DISPATCH_FLOOR_S"])
    assert fit["STEP_OVERHEAD_S"] == pytest.approx(truth["STEP_OVERHEAD_S"], abs=1e-9)
    assert (fit["HBM_EFFICIENCY"], fit["MXU_EFFICIENCY"]) == (hbm, mxu)
    assert fit["rms_log_error"]["rows"] < 1e-9 and fit["rms_log_error"]["matmul"] < 1e-9


def test_a_dispatch_bound_group_is_compared_in_one_program_and_any_other_per_call():
    """`predict_groups` takes a group's candidates' times in one program when every timed
    candidate has one (the runner times a dispatch-bound shape there too: per call, its
    candidates time the host), else per call for all of them, never a mix."""
    from types import SimpleNamespace

    script = load_bench_script("chip_tuning")

    def row(group, rows_, time_s, in_program):
        pallas = {"compiles": True, "time_s": time_s, **({"time_in_program_s": in_program} if in_program else {})}
        return {"group": group, "kernel": "rmsnorm", "dtype": "bf16", "shape": [64, 1024],
                "statics": {"block_rows": rows_}, "pallas": pallas}

    rows = [row("bound", 8, 2e-4, 5e-5), row("bound", 16, 1e-4, 6e-5),
            row("mixed", 8, 2e-4, 5e-5), row("mixed", 16, 1e-4, None)]
    fake = lambda op, args, statics, chip: SimpleNamespace(prediction=None, status="refused", reason="fake")  # noqa: E731
    groups = {g["group"]: g for g in script._predict_groups(rows, fake, lambda op: 0.0)}
    assert groups["bound"]["timed"] == "in one program"
    assert [c["measured_s"] for c in groups["bound"]["candidates"]] == [5e-5, 6e-5]
    assert groups["mixed"]["timed"] == "per call"
    assert [c["measured_s"] for c in groups["mixed"]["candidates"]] == [2e-4, 1e-4]
