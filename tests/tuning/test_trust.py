"""The tuner never chooses a wrong config (issue 45, the new-user findings): a predicted entry
checks its candidates' results, the error allowance follows the benchmark's reduction rule, a
run-time tune where nothing is right raises and records it, a JAX reference need not take the
tunables."""

import functools
import json
import math

import jax
import jax.numpy as jnp
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.experimental import pallas as pl

from tpu_kernels import tpu_kernel, tunables, wiring
from tpu_kernels.autotuner import autotune, tune_calls
from tpu_kernels.autotuner.capture import Call
from tpu_kernels.autotuner.point import STABILITY_PASSES, Candidate, Outcome, predict_call
from tpu_kernels.bench import correctness, timing
from tpu_kernels.tunables import table

from ..helpers import rand, uname
from .kernels import make_op, row_scale
from .test_tuner import FAST, StubTimer


def _lowerable_wrong_op(name, wrong):
    """2 * x, but 2.5 * x with block_rows == `wrong`: a wrong config that the TPU lowering accepts
    (make_op's wrong config writes a scalar to VMEM, which the TPU check prunes)."""

    def kernel(x_ref, o_ref, *, factor):
        o_ref[...] = x_ref[...] * factor

    def scale(x: torch.Tensor, *, block_rows: int = 64) -> torch.Tensor:
        br = min(block_rows, x.shape[0])
        spec = pl.BlockSpec((br, x.shape[1]), lambda i: (i, 0))
        return pl.pallas_call(
            functools.partial(kernel, factor=2.5 if block_rows == wrong else 2.0),
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid=(pl.cdiv(x.shape[0], br),),
            in_specs=[spec],
            out_specs=spec,
        )(x)

    return tpu_kernel(name, tune={"block_rows": [8, 64, 256]}, check_reference=lambda x: 2 * x)(scale)


def _by_block(outcome):
    return {c.config[0]: c for c in outcome.candidates}


# ---- a. a predicted entry never picks a wrong config ------------------------------------------


def test_a_prediction_never_picks_a_config_the_same_run_measured_wrong():
    op = _lowerable_wrong_op(uname(), wrong=256)  # 256: fewest grid steps, so the cost model ranks it first
    x = rand(300, 128)
    result = tune_calls(
        [Call(op, (x,), {}, "tunable")],
        chips=["cpu", "v5e"],
        timer=StubTimer({8: 3e-3, 64: 2e-3}),
        settings=FAST,
    )
    measured, predicted = result.outcomes
    assert _by_block(measured)[256].status == "wrong"
    assert predicted.source == "predicted" and predicted.chosen != {"block_rows": 256}, result.report()
    wrong = _by_block(predicted)[256]
    assert wrong.status == "wrong" and "cpu" in wrong.reason


def test_configs_the_measured_chip_did_not_judge_are_checked_in_the_interpreter():
    op = _lowerable_wrong_op(uname(), wrong=256)
    x = rand(300, 128)
    judged = [Candidate((8,), "measured"), Candidate((64,), "chosen"), Candidate((256,), "pruned", "VMEM")]
    measured = Outcome(
        op.name, "v5e", "measured", [[300, 128]], ("float32",), ((512, 128),), ("block_rows",), judged, None
    )
    o = predict_call(op, (x,), {}, "v6e", measured)  # 256 was pruned on the v5e: never judged there
    wrong = _by_block(o)[256]
    assert wrong.status == "wrong" and "CPU interpreter" in wrong.reason and o.chosen != {"block_rows": 256}


def test_a_prediction_alone_checks_each_candidate_in_the_cpu_interpreter_at_a_smaller_shape():
    op = _lowerable_wrong_op(uname(), wrong=256)
    # a TPU-sized example (shapes only) whose 256-row blocks fit v5e's 16 MiB with the check's
    # headroom (8 MiB of buffers), so the wrong candidate is judged, not pruned
    x = torch.empty(8192, 2048, device="meta")
    result = tune_calls([Call(op, (x,), {}, "tunable")], chips=["v5e"])
    (o,) = result.outcomes
    cands = _by_block(o)
    assert cands[256].status == "wrong" and "CPU interpreter" in cands[256].reason, result.report()
    assert o.chosen == {"block_rows": 64}
    assert cands[64].error_ratio is not None and cands[64].error_ratio <= 1
    shape = o.method["checked_at"]
    assert shape != [[8192, 2048]] and all(d <= 2048 for d in shape[0])
    assert f"checked in the CPU interpreter at shapes {shape}" in result.report()


# ---- b. the allowance assumes the benchmark's reduction length --------------------------------


def _mm_kernel(a_ref, b_ref, o_ref):
    @pl.when(pl.program_id(0) == 0)
    def _():
        o_ref[...] = jnp.zeros_like(o_ref)

    o_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)


def _matmul_op(name, **options):
    """A float32 matmul accumulating over K in block_k steps, declared without reduces=."""

    def mm(a: torch.Tensor, b: torch.Tensor, *, block_k: int = 256) -> torch.Tensor:
        m, k = a.shape
        return pl.pallas_call(
            _mm_kernel,
            out_shape=jax.ShapeDtypeStruct((m, b.shape[1]), jnp.float32),
            grid=(k // block_k,),
            in_specs=[
                pl.BlockSpec((m, block_k), lambda i: (0, i)),
                pl.BlockSpec((block_k, b.shape[1]), lambda i: (i, 0)),
            ],
            out_specs=pl.BlockSpec((m, b.shape[1]), lambda i: (0, 0)),
        )(a, b)

    return tpu_kernel(name, tune={"block_k": [256, 1024, 2048]}, **options)(mm)


def test_a_correct_matmul_is_not_wrong_for_want_of_a_declared_reduction():
    op = _matmul_op(uname(), check_reference=lambda a, b: a @ b)
    a, b = rand(8, 4096), rand(4096, 128)
    result = autotune(
        op, a, b, timer=StubTimer({256: 1e-3, 1024: 1e-3, 2048: 1e-3}), settings=FAST, save=False
    )
    (o,) = result.outcomes
    # n = 1 allowed 2.98e-07 and marked 1024 and 2048 wrong (errors 4.1e-07); the benchmark assumes
    # the largest dimension, 4096
    assert all(c.status in ("measured", "chosen") for c in o.candidates), result.report()
    assert {c.reduction for c in o.candidates} == {correctness.default_reduction((a, b))} == {4096}


# ---- c. a run-time tune where nothing is right --------------------------------------------------


def _wrong_when_tall(name):
    """2 * x, except that every config is wrong above 1000 rows."""

    def tall(x: torch.Tensor, *, block_rows: int = 64) -> torch.Tensor:
        y = row_scale(x, block_rows=block_rows)
        return y * 1.5 if x.shape[0] > 1000 else y

    return tpu_kernel(name, tune={"block_rows": [8, 64, 256]}, check_reference=lambda x: 2 * x)(tall)


def test_a_run_time_tune_where_nothing_is_right_raises_and_is_remembered(tuning_dir, monkeypatch):
    op = _wrong_when_tall(uname())
    autotune(op, rand(300, 128), timer=StubTimer({8: 3e-3, 64: 2e-3, 256: 1e-3}), settings=FAST)
    monkeypatch.setenv("TPU_KERNELS_AUTOTUNE", "1")
    tunables.reload()
    tall = rand(2000, 128)
    with pytest.raises(tunables.NoRightConfigError, match=rf"{op.name}: .*\[2000, 128\]") as e:
        op(tall)  # not the 512-row entry's block_rows=256, just measured wrong here
    assert "block_rows=" in str(e.value) and str(tuning_dir) in str(e.value)
    doc = json.loads((tuning_dir / table.filename(op.name)).read_text())
    failed = [x for x in doc["entries"] if x["source"] == "failed"]
    assert [x["bucket"] for x in failed] == [[[2048, 128]]]

    tuned = []
    online = wiring.hook("online_tuner")
    wiring.install("online_tuner", lambda *a: tuned.append(a) or online(*a))
    try:
        tunables.reload()  # as a new process: the failure is read, not tuned again
        with pytest.raises(tunables.NoRightConfigError):
            op(tall)
    finally:
        wiring.install("online_tuner", online)
    assert tuned == []
    monkeypatch.delenv("TPU_KERNELS_AUTOTUNE")
    tunables.reload()
    with pytest.raises(tunables.NoRightConfigError):
        op(tall)
    torch.testing.assert_close(op(tall, block_rows=64), 3 * tall)  # a caller's own config still runs


# ---- e. a JAX reference that does not take the tunables ---------------------------------------


def test_a_jax_reference_without_the_tunables_checks_every_candidate():
    def dbl(x: torch.Tensor, *, block_rows: int = 64) -> torch.Tensor:
        return row_scale(x, block_rows=block_rows)

    op = tpu_kernel(uname(), tune={"block_rows": [8, 64]}, reference=lambda x: jnp.asarray(x) * 2)(dbl)
    result = autotune(op, rand(300, 128), timer=StubTimer({8: 3e-3, 64: 2e-3}), settings=FAST, save=False)
    (o,) = result.outcomes
    assert all(c.status in ("measured", "chosen") for c in o.candidates), result.report()
    assert not any("reference" in n for n in o.notes), o.notes  # judged by the reference itself


# ---- d. entries keyed by the kernel's program; borrowed configs checked -----------------------

FACTOR = {"value": 2.0}  # what the kernel below reads when traced: "editing" it changes the program


def _reads_factor(name):
    def scaled(x: torch.Tensor, *, block_rows: int = 64) -> torch.Tensor:
        return row_scale(x, block_rows=block_rows) * (FACTOR["value"] / 2.0)

    return tpu_kernel(name, tune={"block_rows": [8, 64, 256]}, check_reference=lambda x: FACTOR["value"] * x)(
        scaled
    )


def test_an_entry_tuned_for_another_program_of_the_kernel_is_not_served(tuning_dir, monkeypatch):
    op = _reads_factor(uname())
    x = rand(300, 128)
    autotune(op, x, timer=StubTimer({8: 3e-3, 64: 2e-3, 256: 1e-3}), settings=FAST)
    (entry,) = json.loads((tuning_dir / table.filename(op.name)).read_text())["entries"]
    assert isinstance(entry["program"], str) and len(entry["program"]) == 64
    assert op.tuned_config(x).config == {"block_rows": 256}
    monkeypatch.setitem(FACTOR, "value", 3.0)  # the kernel is edited
    op.cache_clear()
    tunables.reload()
    with pytest.warns(tunables.TuningNote, match="another program of the kernel"):
        got = op.tuned_config(x)
    assert got.config == {"block_rows": 64} and got.how == "defaults"
    torch.testing.assert_close(op(x), 3 * x)


def _wrong_at_256_when_tall(name):
    def tall(x: torch.Tensor, *, block_rows: int = 64) -> torch.Tensor:
        y = row_scale(x, block_rows=block_rows)
        return y * 1.5 if x.shape[0] > 1000 and block_rows == 256 else y

    return tpu_kernel(name, tune={"block_rows": [8, 64, 256]}, check_reference=lambda x: 2 * x)(tall)


def test_a_config_borrowed_from_the_nearest_bucket_is_checked_at_the_call():
    op = _wrong_at_256_when_tall(uname())
    autotune(op, rand(300, 128), timer=StubTimer({8: 3e-3, 64: 2e-3, 256: 1e-3}), settings=FAST)
    tall = rand(2000, 128)  # bucket 2048: only the 512-row entry's block_rows=256, wrong here
    with pytest.warns(tunables.TuningNote, match=r"checked at this call and is not right here \(wrong"):
        torch.testing.assert_close(op(tall), 2 * tall)
    assert op.tuned_config(tall).config == {"block_rows": 64}
    fine = rand(600, 128)  # bucket 1024: the borrowed 256 is right there and is used
    assert op.tuned_config(fine).config == {"block_rows": 256}


def test_a_compiled_graph_is_not_served_an_entry_of_another_program(tuning_dir):
    op = _reads_factor(uname())
    x = rand(300, 128)
    autotune(op, x, timer=StubTimer({8: 3e-3, 64: 2e-3, 256: 1e-3}), settings=FAST)
    path = tuning_dir / table.filename(op.name)
    path.write_text(path.read_text().replace('"program": "', '"program": "0'))  # another program's digest
    tunables.reload()
    seen = []

    def backend(gm, example_inputs):
        seen.extend(
            n.kwargs.get("block_rows")
            for n in gm.graph.nodes
            if n.op == "call_function" and op.name.split("::")[1] in str(n.target)
        )
        return gm.forward

    torch._dynamo.reset()
    with pytest.warns(tunables.TuningNote, match="another program of the kernel"):
        torch.testing.assert_close(torch.compile(lambda x: op(x), backend=backend, fullgraph=True)(x), 2 * x)
    assert seen == [None]  # the declared default, not the entry's 256


# ---- f. a report and lookups people can read and trust ------------------------------------------


WHY = "block_rows=8 " + " ".join(f"reason{i}" for i in range(60)) + " the end"


def test_the_report_gives_every_reason_whole_and_where_the_time_went():
    def refuses_8(x: torch.Tensor, *, block_rows: int = 64) -> torch.Tensor:
        if block_rows == 8:
            raise ValueError(WHY)
        return row_scale(x, block_rows=block_rows)

    op = tpu_kernel(uname(), tune={"block_rows": [8, 64, 256]}, check_reference=lambda x: 2 * x)(refuses_8)
    result = autotune(op, rand(300, 128), timer=StubTimer({64: 2e-3, 256: 1e-3}), settings=FAST, save=False)
    (o,) = result.outcomes
    assert _by_block(o)[8].reason == f"ValueError: {WHY}"  # 500 characters, cut at 90 (and 300) before
    assert f"ValueError: {WHY}" in " ".join(result.report().split())
    assert all(len(line) <= 200 for line in result.report().splitlines())
    assert all(c.first_call_s > 0 for c in o.candidates if c.status != "refused")
    entry = o.entry().to_json()
    ran = [c for c in entry["candidates"] if c["status"] != "refused"]
    assert all("first_call_s" in c for c in ran) and entry["method"]["total_s"] > 0
    assert (
        "first call" in result.report()
        and "time: first calls" in result.report()
        and "total" in result.report()
    )


class FlipTimer:
    """Each pass a different candidate is decisively fastest, with more samples than all the
    earlier passes together: the pooled samples follow the latest pass, the choice never settles."""

    def __init__(self):
        self.passes = 0

    def __call__(self, device, fns, settings):
        self.passes += 1
        fast = [8, 256, 8, 256][self.passes - 1]
        n = 10**self.passes
        return {
            name: timing.Timing([1e-4 if int(name.split("=")[1]) == fast else 1e-1] * n, 1, 1, 1e-3)
            for name in fns
        }


def test_a_choice_that_does_not_settle_is_said_to_be_unstable():
    op = make_op(uname())
    result = autotune(op, rand(300, 128), timer=FlipTimer(), settings=FAST, save=False)
    (o,) = result.outcomes
    assert len(o.method["passes"]) == 1 + STABILITY_PASSES and not o.method["stable"]
    assert "did not settle" in result.report() and "NOT stable" in result.report()


def test_a_stable_choice_is_confirmed_by_one_more_pass():
    timer = StubTimer({8: 3e-3, 64: 2e-3, 256: 1e-3})
    result = autotune(make_op(uname()), rand(300, 128), timer=timer, settings=FAST, save=False)
    (o,) = result.outcomes
    assert o.method["passes"] == [{"block_rows": 256}] * 2 and o.method["stable"]
    assert len(timer.asked) == 3 + 2  # the second pass times the two fastest only


def test_print_tuning_logs_each_distinct_lookup_once(monkeypatch, capsys):
    op = make_op(uname())
    autotune(op, rand(300, 128), timer=StubTimer({8: 3e-3, 64: 2e-3, 256: 1e-3}), settings=FAST)
    monkeypatch.setenv(tunables.PRINT_ENV, "1")
    tunables.reload()
    capsys.readouterr()
    op(rand(300, 128))
    op(rand(400, 128))  # another shape, the same lookup
    op(rand(300, 128))
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert (
        f"{op.name} chip=cpu dtypes=['float32'] bucket=[(512, 128)]: block_rows=256 from exact entry"
        in lines[0]
    )


def test_tuned_config_says_where_a_config_comes_from():
    op = make_op(uname())
    x = rand(300, 128)
    got = op.tuned_config(x)
    assert (got.config, got.how, got.entry) == ({"block_rows": 64}, "defaults", None)
    autotune(op, x, timer=StubTimer({8: 3e-3, 64: 2e-3, 256: 1e-3}), settings=FAST)
    got = op.tuned_config(x)
    assert (got.config, got.how, got.source) == ({"block_rows": 256}, "exact", "measured")
    assert "block_rows=256 from exact entry (measured, chip cpu, bucket [(512, 128)]" in str(got)
    mine = op.tuned_config(x, block_rows=8)
    assert (mine.config, mine.how, mine.given) == ({"block_rows": 8}, "given", ("block_rows",))


def test_a_shipped_kernel_is_predicted_from_meta_tensors_and_checked_on_the_cpu():
    from tpu_kernels.kernels import softmax  # an autocast policy: the lookup key asked autocast of "meta"

    x = torch.empty(4096, 4096, dtype=torch.bfloat16, device="meta")
    result = tune_calls([Call(softmax, (x,), {}, "tunable")], chips=["v5e"])
    (o,) = result.outcomes
    assert o.chosen is not None and o.method["checked_at"] == [[512, 512]], result.report()
    assert all(c.error_ratio is not None for c in o.candidates if c.status in ("predicted", "chosen"))


@given(
    st.lists(
        st.one_of(st.none(), st.lists(st.integers(1, 1 << 14), min_size=0, max_size=4)),
        min_size=1,
        max_size=4,
    )
)
@settings(max_examples=200, deadline=None)
def test_the_check_shapes_fit_and_keep_equal_dims_equal(shapes):
    from tpu_kernels.autotuner.interpret import CHECK_ELEMENTS, check_shapes

    small = check_shapes(shapes)
    assert [s is None for s in small] == [s is None for s in shapes]
    pairs = [(d, e) for s, t in zip(shapes, small) if s is not None for d, e in zip(s, t, strict=True)]
    assert all(1 <= e <= d for d, e in pairs)  # never grown, never emptied
    assert all(e1 == e2 for d1, e1 in pairs for d2, e2 in pairs if d1 == d2)  # equal dims stay equal
    for t in small:
        if t is not None and math.prod(t) > CHECK_ELEMENTS:
            assert max(d for s in small if s for d in s) <= 8  # only when nothing can be halved


def test_a_reference_that_cannot_take_the_arguments_by_name_is_refused_naming_the_op_and_the_fix():
    def dbl(x: torch.Tensor, *, block_rows: int = 64) -> torch.Tensor:
        return row_scale(x, block_rows=block_rows)

    op = tpu_kernel(uname(), tune={"block_rows": [8, 64]}, reference=lambda x, /: jnp.asarray(x) * 2)(dbl)
    with pytest.raises(TypeError, match=rf"{op.name}: its reference could not be called .* take \*\*kwargs"):
        autotune(op, rand(300, 128), timer=StubTimer({8: 3e-3, 64: 2e-3}), settings=FAST, save=False)
