"""The cost model's rules (`autotuner/predict.py`): the HBM traffic a pipeline moves, the MXU's price
per dtype, and the per-step overhead in the units the docs and the MODEL string state."""

import contextlib
import functools
import re

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl

from tpu_kernels.autotuner import predict
from tpu_kernels.lowering_check import vmem

from ..helpers import ROOT
from .kernels import row_scale

V6E = predict.ChipFigures.of("v6e")


def _eqns(fn, *specs):
    return vmem.traced_pallas_calls(fn, *specs)


def _matmul(a, b, *, bm, bn, bk):
    (m, k), (_, n) = a.shape, b.shape

    def body(a_ref, b_ref, o_ref):
        @pl.when(pl.program_id(2) == 0)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)

        o_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

    return pl.pallas_call(
        body,
        out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32),
        grid=(m // bm, n // bn, k // bk),
        in_specs=[
            pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),
            pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j)),
        ],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
    )(a, b)


@pytest.mark.parametrize("block_rows", [8, 256, 1024])
def test_a_copy_moves_each_byte_once_in_and_once_out_whatever_the_block(block_rows):
    x = jax.ShapeDtypeStruct((8192, 4096), jnp.float32)
    p = predict.predict(_eqns(functools.partial(row_scale, block_rows=block_rows), x), V6E)
    assert p.steps == 8192 // block_rows
    assert p.hbm_bytes == 2 * 8192 * 4096 * 4  # not one block's worth
    assert p.memory_s == pytest.approx(p.hbm_bytes / (V6E.hbm_bytes_per_s * predict.HBM_EFFICIENCY))


def test_an_operand_is_fetched_again_whenever_its_block_index_changes():
    m, n, k, bm, bn, bk = 512, 512, 1024, 128, 256, 256
    a, b = jax.ShapeDtypeStruct((m, k), jnp.bfloat16), jax.ShapeDtypeStruct((k, n), jnp.bfloat16)
    p = predict.predict(_eqns(functools.partial(_matmul, bm=bm, bn=bn, bk=bk), a, b), V6E)
    gi, gj = m // bm, n // bn
    # a is read once per column block of the output, b once per row block, the output written once
    assert p.hbm_bytes == m * k * 2 * gj + k * n * 2 * gi + m * n * 4


@pytest.mark.parametrize("seq, block", [(2048, 512), (1280, 256)])
def test_a_walk_over_a_step_table_copies_a_block_only_where_its_entry_changes(seq, block):
    """The shipped attention's causal forward walks a scalar-prefetch table of (q block, kv block)
    pairs: its q block and its output stay put along a q block's run of kv steps, and its k and
    v blocks change at every step but one per head (q block 0's only kv block is q block 1's
    first). Given the trace's table, the model counts those copies; without it, it counts a
    copy of every block at every step, an upper bound."""
    from tpu_kernels.kernels.attention import pallas

    heads, d = 2, 128
    spec = jax.ShapeDtypeStruct((1, heads, seq, d), jnp.bfloat16)
    fn = lambda q, k, v: pallas.attention_out(q, k, v, causal=True, block_q=block, block_k=block)  # noqa: E731
    ((eqn, operands),) = vmem.traced_kernels(fn, spec, spec, spec)
    n = seq // block
    steps, blocks = heads * n * (n + 1) // 2, heads * n
    tile = block * d * 2
    walked = predict.predict([eqn], V6E, [operands])
    assert walked.steps == steps
    assert walked.hbm_bytes == (2 * blocks + 2 * (steps - heads)) * tile
    unknown = predict.predict([eqn], V6E)
    assert unknown.hbm_bytes == 4 * steps * tile


@pytest.mark.parametrize(
    "name, passes",
    [(None, 1), ("default", 1), ("bfloat16", 1), ("high", 3), ("tensorfloat32", 3), ("highest", None), ("float32", None)],
)
def test_float32_dots_cost_the_passes_of_the_precision_they_were_traced_at(name, passes):
    # None: FLOAT32_MXU_FRACTION's (fitted) number of passes, "highest"'s
    m = n = k = 1024
    costs = {}
    for dtype in (jnp.bfloat16, jnp.float32):
        spec = jax.ShapeDtypeStruct((m, k), dtype)
        with jax.default_matmul_precision(name) if name else contextlib.nullcontext():
            eqns = _eqns(functools.partial(_matmul, bm=256, bn=256, bk=256), spec, spec)
        p = predict.predict(eqns, V6E)
        assert p.mxu_flops == 2 * m * n * k and p.mxu_utilisation == 1.0  # 256-wide blocks fill v6e's MXU
        costs[dtype] = p.compute_s
    assert costs[jnp.bfloat16] == pytest.approx(2 * m * n * k / (V6E.bf16_flops * predict.MXU_EFFICIENCY))
    ratio = 1 / predict.FLOAT32_MXU_FRACTION if passes is None else passes
    assert costs[jnp.float32] == pytest.approx(costs[jnp.bfloat16] * ratio)
    assert 5 < 1 / predict.FLOAT32_MXU_FRACTION < 7  # about six passes at "highest" on a v5e


@pytest.mark.parametrize("torch_name, passes", [("medium", 1), ("high", 3), ("highest", None)])
def test_the_tuner_prices_the_shipped_matmul_at_the_precision_its_calls_run_at(torch_name, passes):
    # autotuner.point traces a candidate under torch's setting: "high" is the kernel's three bf16
    # dots (mosaic_precision.dot), "highest" Mosaic's six passes, "medium" one
    import torch

    from tpu_kernels.autotuner.point import predict_config
    from tpu_kernels.kernels import matmul

    spec = jax.ShapeDtypeStruct((1024, 1024), jnp.float32)
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision(torch_name)
        c = predict_config(matmul, (spec, spec), {"block_m": 256, "block_n": 256, "block_k": 256}, "v6e")
    finally:
        torch.set_float32_matmul_precision(before)
    assert c.status == "predicted", c.reason
    one = 2 * 1024**3 / (V6E.bf16_flops * predict.MXU_EFFICIENCY)
    ratio = 1 / predict.FLOAT32_MXU_FRACTION if passes is None else passes
    assert c.prediction.compute_s == pytest.approx(one * ratio)


def test_the_per_step_overhead_is_what_the_docs_and_the_model_string_say_in_microseconds():
    docs = (ROOT / "docs" / "autotuning.md").read_text()
    (in_docs,) = set(re.findall(r"grid_steps \* ([0-9.]+) us", docs))
    (in_model,) = re.findall(r"\+ ([0-9.]+) us per grid step", predict.MODEL)
    assert float(in_docs) == float(in_model)
    assert f"*{in_docs} us per grid step*" in docs
    per_step_s = float(in_docs) * 1e-6
    x = jax.ShapeDtypeStruct((8192, 128), jnp.float32)
    p = predict.predict(_eqns(functools.partial(row_scale, block_rows=8), x), V6E)  # 1024 small steps
    prologue_s = 8 * 128 * 4 / (V6E.hbm_bytes_per_s * predict.HBM_EFFICIENCY)
    kernel_s = max(p.compute_s, p.memory_s, p.vector_s) + p.steps * per_step_s + prologue_s
    assert p.kernel_s == pytest.approx(kernel_s) and p.seconds == pytest.approx(max(kernel_s, predict.DISPATCH_FLOOR_S))


def test_a_call_costs_at_least_the_dispatch_floor_so_small_candidates_tie():
    x = jax.ShapeDtypeStruct((256, 128), jnp.float32)
    small = [predict.predict(_eqns(functools.partial(row_scale, block_rows=b), x), V6E) for b in (8, 256)]
    assert small[0].kernel_s > small[1].kernel_s  # 32 steps against one
    assert small[0].seconds == small[1].seconds == predict.DISPATCH_FLOOR_S  # a tie: the declared order decides


def test_vector_work_is_the_bodys_vreg_operations_at_the_chips_clock():
    x = jax.ShapeDtypeStruct((8192, 128), jnp.float32)
    p = predict.predict(_eqns(functools.partial(row_scale, block_rows=8), x), V6E)
    assert p.vreg_ops == 1024 * 3  # per (8, 128) step: the load, the product, the store
    assert p.vector_s == pytest.approx(p.vreg_ops / (V6E.clock_hz * predict.VPU_OPS_PER_CYCLE))
    assert predict.ChipFigures.of("v5e").clock_hz == pytest.approx(1.503e9, rel=1e-3)  # 197 TFLOP/s, 4 MXUs of 128^2
