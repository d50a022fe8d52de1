"""The flash-attention template's default blocks (templates/flash_attention/pallas), on the rendered
package as `tpu-kernels new` writes it.

Unset, a block is the whole sequence up to 1024, else the first of 1024, 512, 256 and 128 that
divides it; the backward's blocks and a float32 forward's block_q are instead the widest multiple
of 128 up to 1024 that divides it (896 at 3584 tokens, 640 at 2560 and 1280), which the v5e ran
faster (bench/reports/chip_v5e_blocks_probe.json). Held here without a TPU: the blocks each
pallas_call takes (traced for a v5e), and the backward at such blocks against float64 in Pallas'
interpreter.
"""

from __future__ import annotations

import importlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.experimental.pallas import tpu as pltpu

from tpu_kernels import scaffold
from tpu_kernels.lowering.target import chip, targeting
from tpu_kernels.lowering_check import vmem


@pytest.fixture(scope="module")
def pallas(tmp_path_factory):
    dest = str(tmp_path_factory.mktemp("template_flash"))
    scaffold.new("tfa", "flash_attention", backend="pallas", dest=dest, namespace="tpl_tfa")
    sys.path.insert(0, dest)
    try:
        yield importlib.import_module("tfa.pallas")
    finally:
        sys.path.remove(dest)


def _q_blocks(fn, *specs) -> list[int]:
    """The q-side block length of each pallas_call `fn` traces (the first buffer's rows)."""
    with targeting(chip("v5e")):
        return [fp.buffers[0].shape[-2] for fp in vmem.kernel_footprints(fn, *specs)]


@settings(max_examples=200, deadline=None, database=None, print_blob=True)
@given(units=st.integers(1, 96), widest=st.booleans())
def test_an_unset_block_divides_the_sequence_and_the_widest_is_the_widest_that_does(pallas, units, widest):
    seq = 128 * units
    block = pallas._block("block_k", seq, None, 128, widest)
    if seq <= 1024:
        assert block == seq
        return
    assert seq % block == 0 and block % 128 == 0 and block <= 1024
    if widest:
        assert not any(seq % b == 0 for b in range(block + 128, 1025, 128)), (seq, block)
    else:
        assert block in (1024, 512, 256, 128) and (block == 1024 or seq % (2 * block)), (seq, block)


@pytest.mark.parametrize(
    ("seq", "plain", "wide"), [(3584, 512, 896), (2560, 512, 640), (1280, 256, 640), (4096, 1024, 1024),
                               (5248, 128, 128), (768, 768, 768)]
)
def test_the_widest_block_where_a_power_of_two_is_not(pallas, seq, plain, wide):
    assert pallas._block("block_q", seq, None, 8) == plain
    assert pallas._block("block_q", seq, None, 8, widest=True) == wide


@pytest.mark.parametrize(("dtype", "forward_q"), [("bfloat16", 256), ("float32", 640)])
def test_the_backward_and_a_float32_forwards_q_take_the_widest_blocks(pallas, dtype, forward_q):
    x = jax.ShapeDtypeStruct((1, 2, 1280, 128), dtype)
    lse = jax.ShapeDtypeStruct((1, 2, 1280), "float32")
    assert _q_blocks(lambda q, k, v: pallas.tfa(q, k, v, causal=True), x, x, x) == [forward_q]
    backward = _q_blocks(lambda q, k, v, o, lse, do: pallas.tfa_backward(q, k, v, o, lse, do, causal=True),
                         x, x, x, x, lse, x)
    assert backward == [640, 640]  # dK/dV's and dQ's kernels, 640 of 1280 on each side


def _reference(q, k, v, do):
    """out and (dq, dk, dv) of causal attention in float64."""
    q, k, v, do = (np.asarray(a, np.float64) for a in (q, k, v, do))
    s = np.einsum("bhqd,bhkd->bhqk", q, k) / np.sqrt(q.shape[-1])
    s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    out = p @ v
    dp = do @ np.swapaxes(v, -1, -2)
    ds = p * (dp - np.sum(do * out, -1, keepdims=True)) / np.sqrt(q.shape[-1])
    return out, (ds @ k, np.swapaxes(ds, -1, -2) @ q, np.swapaxes(p, -1, -2) @ do)


def test_the_backward_at_its_widest_default_blocks_matches_float64(pallas):
    """1280 tokens: 640-blocks in the backward (two along each side, the diagonal's mask on both),
    against float64 in the interpreter."""
    rng = np.random.default_rng()
    q, k, v, do = (rng.standard_normal((1, 1, 1280, 128), dtype=np.float32) for _ in range(4))
    with pltpu.force_tpu_interpret_mode():
        out, lse = pallas.tfa(*(jnp.asarray(a) for a in (q, k, v)), causal=True)
        grads = pallas.tfa_backward(*(jnp.asarray(a) for a in (q, k, v)), out, lse, jnp.asarray(do), causal=True)
    ref_out, ref_grads = _reference(q, k, v, do)
    for got, want in zip((out, *grads), (ref_out, *ref_grads), strict=True):
        got = np.asarray(got, np.float64)
        err = np.linalg.norm(got - want) / np.linalg.norm(want)
        assert err < 2e-2, err  # float32 inputs, one bf16 MXU pass per product (FACTS: ~2e-3 at K=2048)
