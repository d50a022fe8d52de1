"""The cost model against a TPU v5e: the constants in tuner/predict.py are the ones the committed
fit record (bench/reports/chip_v5e_tuning_fit.json, by bench/chip_tuning.py) says were fitted,
and the measured v5e matmul table committed beside the kernel loads through the lookup."""

import json

import jax
import jax.numpy as jnp
import pytest
import torch

from tpu_kernels.kernels import matmul
from tpu_kernels.tuner import predict
from tpu_kernels.tuning import lookup

from ..helpers import ROOT

FIT = json.loads((ROOT / "bench/reports/chip_v5e_tuning_fit.json").read_text())
TABLE = ROOT / "tpu_kernels/kernels/matmul/tpu_kernels.matmul.tuning.json"


@pytest.mark.parametrize("name", predict.FITTED)
def test_the_cost_models_constants_are_the_fitted_ones(name):
    assert getattr(predict, name) == FIT["constants"]["fitted"][name], (
        f"predict.{name} differs from bench/reports/chip_v5e_tuning_fit.json; rerun bench/chip_tuning.py"
    )
    assert FIT["constants"]["in_code"][name] == FIT["constants"]["fitted"][name]  # the comparison ran with them


def test_the_record_states_the_fit_and_its_residuals():
    fit = FIT["fit"]
    for part in ("rows", "matmul"):  # the fit lowered the residual it was fitted on
        assert fit["rms_log_error"][part] < fit["rms_log_error_before"][part]
    assert FIT["float32"]["FLOAT32_MXU_FRACTION"] == FIT["constants"]["fitted"]["FLOAT32_MXU_FRACTION"]
    summary = FIT["comparison"]["fitted"]["summary"]
    assert summary["choice_failed_on_chip"] == 0 and summary["kept_but_refused_by_chip"] == 0


def test_a_matmul_candidates_prediction_is_the_records():
    """predict_config on ShapeDtypeStructs gives what the record says for one of its candidates:
    the record is the output of this code, not of an older model."""
    from tpu_kernels.tuner.point import predict_config

    group = next(g for g in FIT["candidates"] if g["group"] == "matmul/bf16[2048,2048,2048]")
    cand = next(c for c in group["candidates"] if c["statics"] == {"block_k": 512, "block_m": 1024, "block_n": 1024})
    a = jax.ShapeDtypeStruct((2048, 2048), jnp.bfloat16)
    c = predict_config(matmul, (a, a), cand["statics"], "v5e")
    assert c.status == "predicted"
    for k in ("compute_s", "memory_s", "prologue_s", "steps"):
        assert getattr(c.prediction, k) == pytest.approx(cand["parts"][k], rel=1e-9)


@pytest.mark.parametrize("m,k,n", [(2048, 2048, 2048), (4096, 4096, 4096), (8192, 4096, 14336), (16, 4096, 14336)])
def test_the_measured_v5e_matmul_table_is_served_on_a_v5e(m, k, n):
    args = (torch.empty(m, k, dtype=torch.bfloat16, device="meta"), torch.empty(k, n, dtype=torch.bfloat16, device="meta"))
    tuned = matmul.tuned
    assert TABLE in tuned.paths()
    entries = lookup.entries_for(matmul.name, tuned.paths())  # read with the declared candidates' types checked
    shapes, dtypes, bucket = tuned.key_of(args, {})
    entry, how = tuned.current(entries, "v5e", dtypes, bucket, matmul.signature.bind(args, {}))
    assert how == "exact" and entry is not None  # and its program digest is the kernel's now
    assert entry.source == "measured" and entry.evidence["method"]["record"] == "bench/reports/chip_v5e_tune.json"
    assert all(tuned.tunables.check_value(name, v) for name, v in entry.config.items())
    times = {json.dumps(c["config"], sort_keys=True): c["median_s"] for c in entry.evidence["candidates"]}
    assert times[json.dumps(dict(entry.config), sort_keys=True)] == min(times.values())
