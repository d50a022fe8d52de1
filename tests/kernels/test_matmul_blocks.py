"""matmul's default blocks (kernels/matmul/blocks.py): the cost model against the v5e's measured
sweeps, legal and fitting choices at any shape, and ragged shapes run without copying operands."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers import rand
from tpu_kernels import testing
from tpu_kernels.kernels import _vmem, matmul
from tpu_kernels.kernels.matmul import blocks, pallas
from tpu_kernels.lowering_check.vmem import memref_shape, traced_pallas_calls
from tpu_kernels.testing import dot_scale

ROOT = Path(__file__).resolve().parents[2]
SWEEP = ROOT / "bench" / "reports" / "chip_v5e_tune.json"


def _measured() -> dict[tuple, dict[tuple, float]]:
    """(dtype itemsize, m, k, n) -> {(bm, bn, bk): fastest measured seconds} from the v5e sweep's
    matmul rows whose blocks divide their shape (blocks past a dimension collapse to it, as the
    kernel collapses them; the kernel then padded the other configs with a copy, which it no
    longer makes)."""
    rows = json.loads(SWEEP.read_text())["tune"]["rows"]
    out: dict[tuple, dict[tuple, float]] = defaultdict(dict)
    for r in rows:
        pallas_row = r.get("pallas")
        if not r["group"].startswith("matmul/") or not isinstance(pallas_row, dict) or not pallas_row.get("time_s"):
            continue
        dt, dims = r["group"].split("/")[1].split("[")
        m, k, n = map(int, dims.rstrip("]").split(","))
        s = r["statics"]
        key = (min(s["block_m"], m), min(s["block_n"], n), min(s["block_k"], k))
        if m % key[0] or n % key[1] or k % key[2]:
            continue
        group = out[(2 if dt == "bf16" else 4, m, k, n)]
        group[key] = min(group.get(key, math.inf), pallas_row["time_s"])
    return out


def test_the_cost_model_fits_the_v5e_sweeps():
    """The model's four figures are the record's fit: over the measured matmul configs (6 shapes,
    bf16 and float32 at one pass) its log error stays within 10% rms (8.5% at the fit), and at
    each shape the config it prices least ran within 5% of the fastest one measured."""
    groups = _measured()
    assert len(groups) >= 6 and sum(map(len, groups.values())) >= 150
    logs = []
    for (itemsize, m, k, n), configs in groups.items():
        predicted = {c: blocks.seconds(m, k, n, *c, itemsize) for c in configs}
        logs += [math.log(predicted[c] / t) for c, t in configs.items()]
        pick = min(predicted, key=predicted.get)
        assert configs[pick] <= 1.05 * min(configs.values()), ((m, k, n), pick)
    assert math.sqrt(np.mean(np.square(logs))) < 0.10


def test_the_default_at_the_sweeps_shapes_is_a_config_it_measured_fast():
    """Where the sweep measured the default's own config, it is within 5% of the fastest."""
    for (itemsize, m, k, n), configs in _measured().items():
        b = blocks.choose(m, k, n, itemsize)
        if (b.m, b.n, b.k) in configs:
            assert configs[b.m, b.n, b.k] <= 1.05 * min(configs.values()), (m, k, n)


@settings(max_examples=200, deadline=None)
@given(
    dims=st.lists(st.one_of(st.integers(1, 40000), st.sampled_from([3584, 18944, 11008, 13824, 2304, 152064])),
                  min_size=3, max_size=3),
    itemsize=st.sampled_from([2, 4]),
    passes=st.sampled_from([1, 3]),
)
def test_defaults_are_legal_and_fit_at_any_shape(dims, itemsize, passes):
    """Each default block is the whole dimension or a multiple of its tile (128 lanes; rows: 8,
    or 128 from 128 rows up), at most its cap, at least 256 unless the dimension is narrower, and
    the three fit what a shipped kernel may ask of VMEM."""
    m, k, n = dims
    bm, bn, bk = blocks.default(m, k, n, itemsize, passes)
    for dim, block, tile, cap in ((m, bm, 8, blocks.BLOCK_CAP["m"]), (n, bn, 128, blocks.BLOCK_CAP["n"]),
                                  (k, bk, 128, blocks.BLOCK_CAP["k"])):
        assert block == dim or (block % tile == 0 and blocks.MIN_BLOCK <= block <= cap), (dims, (bm, bn, bk))
    assert _vmem.fits(blocks.vmem_need(bm, bn, bk, itemsize, passes))


@pytest.mark.parametrize("mkn", [(3000, 4096, 4096), (4096, 3584, 18944), (4096, 18944, 3584), (8, 3584, 18944),
                                 (100, 5000, 300)], ids=lambda s: "x".join(map(str, s)))
def test_ragged_shapes_pass_the_callers_arrays_to_the_kernel(mkn):
    """No pad, slice or copy around the kernel: the traced call is the pallas_call alone, on
    the caller's arrays, and its grid covers each dimension with partial edge blocks."""
    m, k, n = mkn
    a, b = jax.ShapeDtypeStruct((m, k), "bfloat16"), jax.ShapeDtypeStruct((k, n), "bfloat16")
    jaxpr = jax.make_jaxpr(pallas.matmul)(a, b).jaxpr
    assert [e.primitive.name for e in jaxpr.eqns] == ["pallas_call"]
    assert list(jaxpr.eqns[0].invars) == list(jaxpr.invars)
    (eqn,) = traced_pallas_calls(pallas.matmul, a, b)
    (bm, bk), (_, bn) = (memref_shape(x) for x in eqn.params["grid_mapping"].block_mappings[:2])
    assert eqn.params["grid_mapping"].grid == (-(-m // bm), -(-n // bn), -(-k // bk))


def test_a_default_k_tail_is_masked_and_right():
    """K = 5000 takes a K block that does not divide it (the last one partial, masked in the
    kernel): the result matches float64, forward and backward."""
    bm, bn, bk = blocks.default(24, 5000, 136, 4)
    assert 5000 % bk, (bm, bn, bk)
    a, b = rand(24, 5000, requires_grad=True), rand(5000, 136, requires_grad=True)
    out = matmul(a, b)
    testing.assert_close(out, a.double() @ b.double(), torch.float32, scale=dot_scale(5000, torch.float32))
    g = rand(24, 136)
    ga, gb = torch.autograd.grad(out, (a, b), g)
    testing.assert_close(ga, g.double() @ b.double().T, torch.float32, scale=dot_scale(136, torch.float32))
    testing.assert_close(gb, a.double().T @ g.double(), torch.float32, scale=dot_scale(24, torch.float32))


@settings(max_examples=100, deadline=None)
@given(dims=st.lists(st.integers(1, 20000), min_size=3, max_size=3),
       blocks_=st.lists(st.sampled_from([256, 384, 512, 1024, 1920, 2048]), min_size=3, max_size=3))
def test_a_partial_edge_block_is_priced_as_a_whole_one(dims, blocks_):
    """The kernel computes a partial edge block whole (its dot is a full block's), so the model
    prices a shape as the shape its blocks round it up to."""
    (m, k, n), (bm, bn, bk) = dims, blocks_
    up = [-(-d // b) * b for d, b in ((m, bm), (k, bk), (n, bn))]
    here, rounded = blocks.seconds(m, k, n, bm, bn, bk, 2), blocks.seconds(*up, bm, bn, bk, 2)
    assert here == pytest.approx(rounded, rel=1e-12)


# ---- the tuner's prediction is this model ------------------------------------------------------


@pytest.mark.parametrize("chip", ["v5e", "v6e"])
@pytest.mark.parametrize("mkn", [(4096, 4096, 4096), (8, 3584, 18944), (3000, 4096, 4096)], ids=str)
@pytest.mark.parametrize("config", [(None, None, None), (512, 1024, 512)], ids=["default", "given"])
def test_the_tuners_prediction_is_the_default_blocks_cost_model(chip, mkn, config):
    """What `tpu-kernels tune --chips` predicts for a matmul config is `blocks.seconds` at the
    blocks the call would run with (the op's `cost=`), on the chip's peaks (`Chip.like`); for the
    default config those are `blocks.choose`'s, so the default and the prediction are one model."""
    from tpu_kernels.autotuner.point import cost_tie, predict_config
    from tpu_kernels.autotuner.predict import DISPATCH_FLOOR_S, ChipFigures

    m, k, n = mkn
    a, b = jax.ShapeDtypeStruct((m, k), "bfloat16"), jax.ShapeDtypeStruct((k, n), "bfloat16")
    statics = dict(zip(("block_m", "block_n", "block_k"), config))
    c = predict_config(matmul, (a, b), statics, chip)
    assert c.status == "predicted", c.reason
    figures = ChipFigures.of(chip)
    if config[0] is None:
        bm, bn, bk = blocks.default(m, k, n, 2)
    else:
        bm, bn, bk = (min(d, x) for d, x in zip((m, n, k), config))
    expected = blocks.seconds(m, k, n, bm, bn, bk, 2, chip=blocks.Chip.like(figures))
    assert c.prediction.model == "cost=" and c.prediction.kernel_s == expected
    assert c.prediction.seconds == max(DISPATCH_FLOOR_S, expected)
    if chip == "v5e" and config[0] is None:  # the v5e's own figures: the default's price
        assert c.prediction.kernel_s == pytest.approx(blocks.choose(m, k, n, 2).seconds, rel=1e-12)
    assert cost_tie(matmul) == blocks.TIE


@pytest.mark.parametrize("mkn", [(2543, 3072, 128000), (62, 2304, 9216), (4096, 4096, 4096)], ids=str)
def test_the_tuner_breaks_a_predicted_tie_as_the_default_does(mkn):
    """Configs the cost model prices within `TIE` tie; the tuner breaks the tie by the op's
    `prefer` (`blocks.preference` of the blocks the call would run with), the rule `blocks.choose`
    breaks its own by, ahead of the declared order. At the drawn LM head [2543, 3072] @ [3072,
    128000] the declared order alone chose 256-row blocks, which re-read the weight twice as
    often (bench/reports/chip_v5e_drawn.json, drawn_tune)."""
    from tpu_kernels.autotuner.point import cost_prefer
    from tpu_kernels.autotuner.select import choose_predicted
    from tpu_kernels.kernels.matmul import pallas

    m, k, n = mkn
    a, b = jax.ShapeDtypeStruct((m, k), "bfloat16"), jax.ShapeDtypeStruct((k, n), "bfloat16")
    prefer = cost_prefer(matmul)
    assert prefer is pallas.predicted_preference
    space = pallas.Config.space()
    configs = [(bm, bn, bk) for bm in space["block_m"] for bn in space["block_n"] for bk in space["block_k"]
               if None not in (bm, bn, bk) and _vmem.fits(blocks.vmem_need(min(bm, m), min(bn, n), min(bk, k), 2))]
    kw = [dict(zip(("block_m", "block_n", "block_k"), c)) for c in configs]
    keys = {c: prefer(a, b, **w) for c, w in zip(configs, kw)}
    for (bm, bn, bk), key in keys.items():
        assert key == blocks.preference(m, k, n, bm, bn, bk)
    predicted = {c: blocks.seconds(m, k, n, *c, 2) for c in configs}
    choice = choose_predicted(configs, predicted, blocks.TIE, keys)
    least = min(predicted.values())
    tied = [c for c in configs if predicted[c] <= least * (1 + blocks.TIE)]
    assert choice.config == min(tied, key=lambda c: (keys[c], configs.index(c)))
    assert set(choice.tied) == set(tied)
    # choose's own tie rule is the same function, over its own candidates
    own = [(bm, bn, bk) for bm in blocks.candidates(m, 128, blocks.BLOCK_CAP["m"])
           for bn in blocks.candidates(n, 128, blocks.BLOCK_CAP["n"])
           for bk in blocks.candidates(k, 128, blocks.BLOCK_CAP["k"]) if _vmem.fits(blocks.vmem_need(bm, bn, bk, 2))]
    price = {c: blocks.seconds(m, k, n, *c, 2) for c in own}
    floor = min(price.values())
    got = blocks.choose(m, k, n, 2)
    assert (got.m, got.n, got.k) == min((c for c in own if price[c] <= floor * (1 + blocks.TIE)),
                                        key=lambda c: (blocks.preference(m, k, n, *c), price[c]))


def test_the_tuners_predicted_choice_goes_by_the_cost_models_prefer(monkeypatch):
    """`predict_call` hands the op's `prefer` keys to the tie: with a `prefer` that ranks the
    smallest output block first, the choice among the tied predictions is that one, where the
    declared order alone (the default first) would keep the default."""
    import torch

    from tpu_kernels.autotuner.point import predict_call
    from tpu_kernels.autotuner.select import choose_predicted

    def smallest_output_first(a, b, **kw):
        (m, k), n = tuple(a.shape), b.shape[1]
        bm, bn, _, _ = pallas._blocks(m, k, n, jnp.bfloat16, kw.get("block_m"), kw.get("block_n"), kw.get("block_k"))
        return (min(bm, m) * min(bn, n),)

    monkeypatch.setattr(pallas.predicted_seconds, "prefer", smallest_output_first)
    a, b = torch.randn(1000, 4096, dtype=torch.bfloat16), torch.randn(4096, 8960, dtype=torch.bfloat16)
    o = predict_call(matmul, (a, b), {}, "v5e")
    names = matmul.tunables.names
    order = [c.config for c in o.candidates]
    predicted = {c.config: c.prediction.seconds for c in o.candidates if c.status in ("predicted", "chosen")}
    keys = {c: smallest_output_first(a, b, **dict(zip(names, c))) for c in predicted}
    expected = choose_predicted(order, predicted, blocks.TIE, keys)
    assert o.choice.config == expected.config
    assert choose_predicted(order, predicted, blocks.TIE).config == order[0] != expected.config


def test_another_chips_peaks_price_the_same_blocks_faster_where_they_are_higher():
    """`Chip.like`: a v6e's bf16 peak is 4.7x a v5e's; a compute-bound call is priced about that
    much faster, at the v5e's fitted shares of each peak."""
    from tpu_kernels.autotuner.predict import ChipFigures

    v5e, v6e = (blocks.Chip.like(ChipFigures.of(c)) for c in ("v5e", "v6e"))
    assert v5e.mxu_rate == pytest.approx(blocks.MXU_RATE, rel=1e-3) and v5e.mxu_rows == blocks.MXU_ROWS
    t5, t6 = (blocks.seconds(8192, 8192, 8192, 1024, 1024, 1024, 2, chip=c) for c in (v5e, v6e))
    ratio = ChipFigures.of("v6e").bf16_flops / ChipFigures.of("v5e").bf16_flops
    assert 0.7 * ratio < t5 / t6 <= ratio


def test_a_one_step_block_is_priced_without_an_accumulator(monkeypatch):
    """Where block_k covers K the kernel writes its product at once (pallas._one_step): the
    accumulator's cost (ACC_S) prices every several-step block and no one-step one."""
    m, k, n = 2560, 1536, 8960
    one, several = (512, 1792, 1536), (512, 1792, 768)
    before = [blocks.seconds(m, k, n, *b, 2) for b in (one, several)]
    monkeypatch.setattr(blocks, "ACC_S", 10 * blocks.ACC_S)
    after = [blocks.seconds(m, k, n, *b, 2) for b in (one, several)]
    assert after[0] == before[0] and after[1] > before[1]


def test_the_tie_goes_to_the_cheapest_one_step_blocks_unless_decoding():
    """Among tied prices, blocks whose block_k covers K come first (and go by price), where M
    fills the MXU's rows; a decode batch's ties go by the output block as before."""
    assert blocks.preference(2560, 1536, 8960, 512, 1792, 1536) < blocks.preference(2560, 1536, 8960, 1280, 1792, 512)
    assert blocks.preference(8, 1536, 8960, 8, 512, 1536) > blocks.preference(8, 1536, 8960, 8, 3072, 256)
    b = blocks.choose(2560, 1536, 8960, 2)
    assert (b.m, b.n, b.k) == (512, 1792, 1536)
