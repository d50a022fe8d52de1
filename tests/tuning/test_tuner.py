"""`tpu_kernels.autotune` end to end on this CPU: the selection, correctness before speed,
pruning before running, predicted TPU rankings, the tables it writes, and Tokamax's delegation."""

import json

import pytest
import torch

import tpu_kernels
from tpu_kernels import tunables
from tpu_kernels.autotuner import autotune, tune_calls
from tpu_kernels.autotuner.capture import Call
from tpu_kernels.bench import timing
from tpu_kernels.tunables import table

from ..helpers import needs_tokamax, rand, uname
from .kernels import make_op

FAST = timing.Settings(rounds=5, min_sample_s=0.002, warmup_s=0.2, lead_in_s=0.002)


class StubTimer:
    """A deterministic timer: each candidate's samples are `base[block_rows]` times (1 +- 1%)."""

    def __init__(self, base):
        self.base, self.asked = base, []

    def __call__(self, device, fns, settings):
        out = {}
        for name in fns:
            self.asked.append(name)
            block = int(name.split("=")[1])
            t = self.base[block]
            out[name] = timing.Timing([t * 0.99, t, t * 1.01, t, t], 1, 1, t)
        return out


def _status(result):
    (outcome,) = [o for o in result.outcomes if o.source == "measured"]
    return {c.config[0]: c for c in outcome.candidates}, outcome


def test_decisive_timings_pick_the_fastest_and_the_table_says_why(tuning_dir):
    op = make_op(uname())
    x = rand(300, 128)
    timer = StubTimer({8: 3e-3, 64: 2e-3, 256: 1e-3})
    result = autotune(op, x, timer=timer, settings=FAST)
    cands, outcome = _status(result)
    assert outcome.chosen == {"block_rows": 256} and outcome.choice.decisive
    assert [c.status for c in cands.values()] == ["measured", "measured", "chosen"]
    assert op.tuned.fill((x,), {})["block_rows"] == 256  # saved, and used by this process at once
    doc = json.loads((tuning_dir / table.filename(op.name)).read_text())
    (entry,) = doc["entries"]
    assert (entry["chip"], entry["dtypes"], entry["bucket"], entry["source"]) == (
        "cpu",
        ["float32"],
        [[512, 128]],
        "measured",
    )
    assert entry["shape"] == [[300, 128]] and entry["config"] == {"block_rows": 256}
    assert {c["status"] for c in entry["candidates"]} == {"measured", "chosen"}
    assert "block_rows=256" in result.report() and "decisive" in result.report()


def test_ties_keep_the_default(tuning_dir):
    op = make_op(uname(), default=64)
    result = autotune(
        op, rand(300, 128), timer=StubTimer({8: 1e-3, 64: 1.001e-3, 256: 1.002e-3}), settings=FAST
    )
    _, outcome = _status(result)
    assert outcome.chosen == {"block_rows": 64} and not outcome.choice.decisive


def test_a_wrong_candidate_is_never_timed_nor_chosen_and_is_reported():
    op = make_op(uname(), wrong=8)
    timer = StubTimer({8: 1e-4, 64: 2e-3, 256: 3e-3})  # the wrong one would be fastest
    result = autotune(op, rand(300, 128), timer=timer, settings=FAST)
    cands, outcome = _status(result)
    assert cands[8].status == "wrong" and "error" in cands[8].reason and cands[8].error_ratio > 1
    assert "block_rows=8" not in timer.asked
    assert outcome.chosen == {"block_rows": 64}
    assert "wrong" in result.report()


def test_candidates_the_kernel_refuses_at_the_shape_never_run():
    op = make_op(uname(), divides=True, candidates=(8, 64, 256), default=64)
    x = rand(384, 128)  # 256 does not divide 384
    timer = StubTimer({8: 3e-3, 64: 2e-3, 256: 1e-4})
    result = autotune(op, x, timer=timer, settings=FAST)
    cands, outcome = _status(result)
    assert cands[256].status == "refused" and "does not divide" in cands[256].reason
    assert "block_rows=256" not in timer.asked
    assert op.cache_info().size == 2  # only 8 and 64 were ever compiled and run
    assert outcome.chosen == {"block_rows": 64}


def test_real_interpreter_timings_pick_the_block_with_fewer_grid_steps(tuning_dir):
    op = make_op(uname(), candidates=(8, 1024), default=8)
    x = rand(1024, 128)
    result = autotune(op, x, settings=FAST)
    cands, outcome = _status(result)
    # 128 grid steps against one in Pallas' interpreter: far beyond the noise
    assert outcome.chosen == {"block_rows": 1024} and outcome.choice.decisive, result.report()
    assert cands[8].timing.median > cands[1024].timing.median
    torch.testing.assert_close(op(x), 2 * x)


def test_the_predicted_tpu_ranking_prunes_what_does_not_fit_and_runs_only_the_cpu_check():
    op = make_op(uname(), candidates=(8, 256, 8192), default=8)
    # shapes only: nothing can run. 256 rows of 2048 float32: 8 MiB of blocks, double-buffered
    # (at 4096 columns they made exactly 16 MiB, which a v5e refuses: its compiler needs room too)
    x = torch.empty(8192, 2048, device="meta")
    result = tune_calls([Call(op, (x,), {}, "tunable")], chips=["v5e", "v6e", "7x"])
    assert [o.chip for o in result.outcomes] == ["v5e", "v6e", "7x"]
    for o in result.outcomes:
        cands = {c.config[0]: c for c in o.candidates}
        assert o.source == "predicted"
        assert cands[8192].status == "pruned" and "VMEM" in cands[8192].reason
        assert cands[256].prediction.seconds < cands[8].prediction.seconds  # 32x fewer grid steps
        assert o.chosen == {"block_rows": 256}
        e = o.entry()
        assert e.source == "predicted" and e.evidence["method"]["kind"] == "predicted"
    # nothing ran at the call's shapes; the CPU check ran 8 and 256 once each, for the three chips
    assert op.cache_info().size == 2 and op.cache_info().misses == 2


def test_the_context_manager_applies_a_result_without_saving(tuning_dir):
    op = make_op(uname())
    x = rand(300, 128)
    result = autotune(op, x, timer=StubTimer({8: 3e-3, 64: 2e-3, 256: 1e-3}), settings=FAST, save=False)
    assert not list(tuning_dir.iterdir())
    assert op.tuned.fill((x,), {}).get("block_rows") is None
    with result:
        assert op.tuned.fill((x,), {})["block_rows"] == 256
    assert op.tuned.fill((x,), {}).get("block_rows") is None


def test_a_shipped_kernel_tunes_and_its_calls_use_the_result(tuning_dir):
    from tpu_kernels.kernels import softmax

    x = rand(200, 256)
    result = tpu_kernels.autotune(lambda x: softmax(x).sum(), x, settings=FAST)
    (o,) = result.outcomes
    assert o.op == "tpu_kernels::softmax" and o.chosen is not None
    assert all(c.status in ("measured", "chosen") for c in o.candidates), result.report()
    assert softmax.tuned.fill((x,), {})["block_rows"] == o.chosen["block_rows"]
    torch.testing.assert_close(softmax(x), torch.softmax(x, -1))


def test_online_tuning_only_when_asked(tuning_dir, monkeypatch):
    op = make_op(uname())
    x = rand(300, 128)
    op(x)
    assert not list(tuning_dir.iterdir())  # never implicitly
    monkeypatch.setenv("TPU_KERNELS_AUTOTUNE", "1")
    tunables.reload()
    torch.testing.assert_close(op(x), 2 * x)
    assert (tuning_dir / table.filename(op.name)).exists()
    assert op.tuned.fill((x,), {}).get("block_rows") in (8, 64, 256)


@needs_tokamax
def test_tokamax_ops_go_to_tokamaxs_autotuner(tuning_dir):
    from tpu_kernels.tokamax import tuned
    from tpu_kernels.tokamax.normalization.op import layer_norm

    x, w, b = rand(64, 128), rand(128), rand(128)
    result = autotune(lambda: layer_norm(x, w, b))
    assert list(result.tokamax) == ["cpu"] and len(result.tokamax["cpu"].data) >= 1
    (path,) = tuning_dir.glob("tokamax.*.autotuning.json")
    assert json.loads(path.read_text())["device_kind"] == "cpu"
    assert tuned.results()  # later traces run inside it
    want = torch.nn.functional.layer_norm(x.double(), (128,), w.double(), b.double())
    torch.testing.assert_close(layer_norm(x, w, b).double(), want, rtol=1e-4, atol=1e-4)


def test_chips_that_cannot_be_predicted_are_an_error():
    op = make_op(uname())
    with pytest.raises(ValueError, match=r"chip 'cuda:X' is not attached here \('cpu'\)"):
        autotune(op, rand(8, 128), chips=["cuda:X"])


_HELION_SCRIPT = """
import torch, helion, helion.language as hl
import tpu_kernels
from tpu_kernels import tpu_kernel

@helion.kernel(backend="pallas", autotune_effort="quick", autotune_budget_seconds=20)
def rowsum(x: torch.Tensor) -> torch.Tensor:
    n, _ = x.size()
    out = torch.empty([n], dtype=x.dtype, device=x.device)
    for tile in hl.tile(n):
        out[tile] = torch.sum(x[tile, :], dim=-1)
    return out

op = tpu_kernel("tuner_helion::rowsum")(rowsum)
x = torch.randn(64, 128)
result = tpu_kernels.autotune(lambda: op(x), save=False)
print("HELION", result.helion)
"""


@pytest.mark.slow
def test_helion_kernels_go_to_helions_autotuner(tmp_path):
    import os
    import subprocess
    import sys

    from ..helpers import ROOT

    env = {k: v for k, v in os.environ.items() if k != "HELION_DISALLOW_AUTOTUNING"}
    env.update(
        HELION_CACHE_DIR=str(tmp_path / "helion"),
        HELION_AUTOTUNE_PALLAS_RANK_BY="wall_time",
        JAX_PLATFORMS="cpu",
        PYTHONPATH=str(ROOT),
        TPU_KERNELS_TUNING_DIR=str(tmp_path / "tuning"),
    )
    script = tmp_path / "tune.py"
    script.write_text(_HELION_SCRIPT)
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "HELION ['tuner_helion::rowsum on cpu: Helion chose" in out.stdout, out.stdout[-2000:]
    assert list((tmp_path / "helion").rglob("*.best_config")), "Helion's autotuner wrote no config"


# ---- the candidates of a call that fixes some tunables itself ---------------------------------


def test_a_call_fixing_tunables_tunes_only_the_configs_that_keep_every_fixed_value():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from tpu_kernels.autotuner.point import candidates_for

    from .kernels import make_op2

    op = make_op2(uname(), block_rows=(8, 64, 256), lanes=(128, 256, 512))
    t = op.tunables

    @settings(max_examples=80, deadline=None)
    @given(st.sampled_from([8, 64, 256, 100, None]), st.sampled_from([128, 256, 512, 384, None]))
    def check(block_rows, lanes):
        fixed = {n: v for n, v in (("block_rows", block_rows), ("lanes", lanes)) if v is not None}
        got = candidates_for(op, {"x": None, **fixed})
        # the caller's value of every fixed tunable is in every candidate, its own value if need be
        assert got and all(c[t.names.index(n)] == v for c in got for n, v in fixed.items())
        declared = [c for c in t.configs if all(c[t.names.index(n)] == v for n, v in fixed.items())]
        assert got == (declared or [t.config_of(fixed)])

    check()


def test_a_value_outside_the_candidates_is_measured_as_the_caller_gave_it():
    op = make_op(uname())  # candidates 8, 64, 256
    timer = StubTimer({8: 3e-3, 64: 2e-3, 100: 2.5e-3, 256: 1e-3})
    x = rand(300, 128)
    result = autotune(lambda: op(x, block_rows=100), timer=timer, settings=FAST, save=False)
    cands, outcome = _status(result)
    assert list(cands) == [100] and timer.asked == ["block_rows=100"]
    assert outcome.chosen == {"block_rows": 100}
