"""matmul's gated kernels (kernels/matmul/gated.py): (silu(gate) * up) @ w and its three
gradients, in Pallas' TPU interpreter, against float64 on the host; their errors and blocks."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from jax.experimental.pallas import tpu as pltpu

from tests.helpers import hypothesis_settings
from tpu_kernels.kernels import _vmem
from tpu_kernels.kernels.matmul import blocks, gated

# normwise error bounds against float64: one rounding of h to the operands' dtype, then a
# float32-accumulated product (bf16: ~2e-3 measured, bf16's unit roundoff 3.9e-3)
BOUND = {jnp.float32: 1e-5, jnp.bfloat16: 1.2e-2}


def _f64(gate, up, w, d):
    """out, dgate, dup, dw in float64, from the operands as the kernel sees them."""
    g, u, w, d = (np.asarray(jnp.asarray(x, jnp.float32), np.float64) for x in (gate, up, w, d))
    s = 1.0 / (1.0 + np.exp(-g))
    h = g * s * u
    dh = d @ w.T
    return h @ w, dh * u * s * (1.0 + g * (1.0 - s)), dh * g * s, h.T @ d


def _normwise(got, want) -> float:
    got = np.asarray(jnp.asarray(got, jnp.float32), np.float64)
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-300))


def _operands(rng, m, k, n, dtype, gate_scale=1.0):
    def r(*shape, scale=1.0):
        return jnp.asarray(rng.standard_normal(shape) * scale, dtype)

    return r(m, k, scale=gate_scale), r(m, k), r(k, n, scale=k**-0.5), r(m, n)


def _check(m, k, n, dtype, blocks_, seed, gate_scale=1.0):
    gate, up, w, d = _operands(np.random.default_rng(seed), m, k, n, dtype, gate_scale)
    with pltpu.force_tpu_interpret_mode():
        out = gated.swiglu_matmul(gate, up, w, **blocks_)
        grads = gated.swiglu_matmul_backward(gate, up, w, d, **blocks_)
    want = _f64(gate, up, w, d)
    assert out.shape == (m, n) and out.dtype == dtype
    assert [g.shape for g in grads] == [(m, k), (m, k), (k, n)] and all(g.dtype == dtype for g in grads)
    for name, got, ref in zip(("out", "dgate", "dup", "dw"), (out, *grads), want, strict=True):
        err = _normwise(got, ref)
        assert err < BOUND[dtype], (name, err, (m, k, n), blocks_, seed)


@given(
    m=st.integers(1, 80),
    k=st.integers(1, 300),
    n=st.integers(1, 300),
    dtype=st.sampled_from([jnp.float32, jnp.bfloat16]),
    given_blocks=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
@hypothesis_settings(12, 60)
def test_the_gated_product_and_its_gradients_match_float64(m, k, n, dtype, given_blocks, seed):
    """Any shape, with the default blocks or small ones that leave partial edge blocks along
    every dimension and a masked tail in every contraction (M's in the weight's gradient)."""
    blocks_ = dict(block_m=16, block_n=128, block_k=128) if given_blocks else {}
    _check(m, k, n, dtype, blocks_, seed)


def test_a_tail_in_every_contraction_is_masked(fresh_seed):
    """K = 300 in 128-blocks (the forward's tail), N = 200 (dh's), M = 40 in 16-blocks (dw's)."""
    _check(40, 300, 200, jnp.float32, dict(block_m=16, block_n=128, block_k=128), fresh_seed)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_a_tile_made_in_slices_masks_the_tail_inside_a_slice(dtype, fresh_seed):
    """512-blocks along both contractions, made in 256-slices: K = 1324 leaves its last block 300
    entries, one whole slice and 44 of the next (the forward's); M = 600 leaves 88 (the weight
    gradient's), part of the first slice and none of the second."""
    _check(600, 1324, 200, dtype, dict(block_m=512, block_n=128, block_k=512), fresh_seed)


def test_a_saturated_gate_stays_finite_and_right(fresh_seed):
    """Gates of +-40 and more: silu(g) is g or 0 there, its derivative 1 or 0, never NaN."""
    _check(24, 256, 128, jnp.float32, {}, fresh_seed, gate_scale=40.0)


def test_zero_size_operands_give_torchs_empty_results():
    g = jnp.zeros((0, 8), jnp.float32)
    w = jnp.ones((8, 5), jnp.float32)
    assert gated.swiglu_matmul(g, g, w).shape == (0, 5)
    empty_k = jnp.zeros((3, 0), jnp.float32)
    out = gated.swiglu_matmul(empty_k, empty_k, jnp.zeros((0, 5), jnp.float32))
    assert out.shape == (3, 5) and not out.any()  # an empty sum
    dg, du, dw = gated.swiglu_matmul_backward(empty_k, empty_k, jnp.zeros((0, 5), jnp.float32), jnp.ones((3, 5)))
    assert (dg.shape, du.shape, dw.shape) == ((3, 0), (3, 0), (0, 5))


@pytest.mark.parametrize(
    "args, message",
    [
        (((4, 8), (4, 8), (9, 5)), r"expected gate \[M, K\] and w \[K, N\], got \(4, 8\) and \(9, 5\)"),
        (((4, 8), (4, 7), (8, 5)), r"expected up of gate's shape \(4, 8\), got \(4, 7\)"),
    ],
)
def test_mismatched_shapes_are_refused_by_name(args, message):
    g, u, w = (jnp.ones(s, jnp.float32) for s in args)
    with pytest.raises(ValueError, match=r"swiglu_matmul: " + message):
        gated.swiglu_matmul(g, u, w)


def test_mixed_and_integer_dtypes_are_refused_by_name():
    g = jnp.ones((4, 8), jnp.float32)
    with pytest.raises(ValueError, match="swiglu_matmul: gate, up and w must have one dtype"):
        gated.swiglu_matmul(g, g.astype(jnp.bfloat16), g.T)
    i = jnp.ones((4, 8), jnp.int32)
    with pytest.raises(TypeError, match="swiglu_matmul: argument 'gate' has dtype int32"):
        gated.swiglu_matmul(i, i, i.T)


def test_a_wrong_grad_out_is_refused_by_name():
    g = jnp.ones((4, 8), jnp.float32)
    with pytest.raises(ValueError, match=r"swiglu_matmul_backward: expected grad_out \[4, 5\], got \(4, 6\)"):
        gated.swiglu_matmul_backward(g, g, jnp.ones((8, 5), jnp.float32), jnp.ones((4, 6), jnp.float32))


def test_blocks_are_checked_as_matmuls_are():
    g = jnp.ones((64, 4096), jnp.bfloat16)
    w = jnp.ones((4096, 4096), jnp.bfloat16)
    with pytest.raises(ValueError, match=r"block_n=100 must be a positive multiple of 128"):
        gated.swiglu_matmul(g, g, w, block_n=100)
    with pytest.raises(ValueError, match=r"swiglu_matmul: blocks \(64, 4096, 4096\).*need about \d+ MiB of VMEM"):
        gated.swiglu_matmul(g, g, w, block_n=4096, block_k=4096)


@pytest.mark.parametrize("need", [gated._prologue_need, gated._epilogue_need], ids=["prologue", "epilogue"])
@pytest.mark.parametrize("shape", [(2560, 8960, 1536), (1536, 28672, 8192), (8192, 14336, 4096), (16, 14336, 4096)])
def test_default_blocks_fit_the_gated_kernels_need_which_is_more_than_matmuls(shape, need):
    """Each default is chosen under the gated kernel's own need (the second operand, the gate's
    float32 temporaries, the second output), which fits and is more than matmul's."""
    b = blocks.choose(*shape, 2, 1, need)
    assert _vmem.fits(need(b.m, b.n, b.k, 2, 1))
    assert need(b.m, b.n, b.k, 2, 1) > blocks.vmem_need(b.m, b.n, b.k, 2, 1)


def test_a_prologue_made_in_slices_needs_a_slices_temporaries_not_the_tiles():
    """Where SLICE divides block_k the gate's float32 temporaries are a (bm, 256) slice's, so
    (512, 1536, 2048) fits under the cap where (512, 1536, 1920), made whole, does not."""
    assert gated._slice(2048) == gated._slice(1792) == gated.SLICE and gated._slice(1920) == 1920
    assert _vmem.fits(gated._prologue_need(512, 1536, 2048, 2))
    assert not _vmem.fits(gated._prologue_need(512, 1536, 1920, 2))
    assert gated._prologue_need(512, 1536, 2048, 2) < gated._prologue_need(512, 1536, 1920, 2)
    # over matmul's: the up operand's block, double-buffered, and a slice's three float32 temporaries
    extra = gated._prologue_need(512, 1536, 2048, 2) - blocks.vmem_need(512, 1536, 2048, 2)
    assert extra >= 2 * 512 * 2048 * 2 + 3 * 512 * 256 * 4


def test_the_gates_price_makes_a_narrow_block_n_cost_the_gate_again():
    """The prologue's price (`GATE`): g's and u's blocks and the gate's vector work are paid once
    per block along N, so at qwen2.5-1.5b's down projection the forward's default takes the whole
    d (1536), where the 768 that matmul's model took ran 16% slower on the chip
    (bench/reports/chip_v5e_blocks_probe.json); at any blocks the gate costs more the narrower
    block_n is, and never less than nothing."""
    m, k, n = 2560, 8960, 1536
    assert blocks.choose(m, k, n, 2, 1, gated._prologue_need, gated.GATE).n == n

    def price(bn, prologue=blocks.PLAIN):
        return blocks.seconds(m, k, n, 512, bn, 1792, 2, prologue=prologue)

    assert 0 < price(1536, gated.GATE) - price(1536) < price(768, gated.GATE) - price(768)
    assert price(1536, gated.GATE) < price(768, gated.GATE)


def test_the_tanh_sigmoid_is_the_logistic_to_float32s_rounding_of_one():
    """(1 + tanh(x / 2)) / 2 against 1 / (1 + exp(-x)): within float32's rounding of 1 absolutely;
    in the far negative tail, where the logistic is under that, it reads 0."""
    x = jnp.linspace(-60.0, 60.0, 2001, dtype=jnp.float32)
    np.testing.assert_allclose(np.asarray(gated._sigmoid(x)), np.asarray(jax.nn.sigmoid(x)), rtol=2e-6, atol=2e-7)


def test_the_gated_kernels_lower_for_tpu():
    """Forward (one kernel) and backward (two) at the narrow layer's down projection, lowered for
    a v5e without one."""
    from tpu_kernels.lowering import target

    g = jax.ShapeDtypeStruct((2560, 8960), jnp.bfloat16)
    w = jax.ShapeDtypeStruct((8960, 1536), jnp.bfloat16)
    d = jax.ShapeDtypeStruct((2560, 1536), jnp.bfloat16)
    with target.targeting(target.chip("v5e")):
        texts = [jax.jit(f).trace(*args).lower(lowering_platforms=("tpu",)).as_text()
                 for f, args in ((gated.swiglu_matmul, (g, g, w)), (gated.swiglu_matmul_backward, (g, g, w, d)))]
    assert [t.count("tpu_custom_call") for t in texts] == [1, 2]
