"""attention by token (`pallas.attention_by_token` and its backward): q, k, v [batch, seq, heads,
head_dim], each head read in place, against the by-head kernels (tested against float64 in
test_attention.py) in Pallas' TPU interpreter: the same blocks give the same values."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from jax.experimental.pallas import tpu as pltpu

from tests.helpers import hypothesis_settings
from tpu_kernels.kernels.attention import pallas
from tpu_kernels.lowering import target


def _swap(x):
    return jnp.swapaxes(x, 1, 2)


def _same(b, h, group, sq, sk, d, statics, seed, dtype=jnp.float32):
    rng = np.random.default_rng(seed)

    def r(*shape):
        return jnp.asarray(rng.standard_normal(shape), dtype)

    hk = h // group
    q, k, v, g = r(b, h, sq, d), r(b, hk, sk, d), r(b, hk, sk, d), r(b, h, sq, d)
    with pltpu.force_tpu_interpret_mode():
        out, lse = pallas.attention(q, k, v, **statics)
        grads = pallas.attention_backward(q, k, v, out, lse, g, **statics)
        t_out, t_lse = pallas.attention_by_token(_swap(q), _swap(k), _swap(v), **statics)
        t_visible = pallas.attention_out_by_token(_swap(q), _swap(k), _swap(v), **statics)
        t_grads = pallas.attention_backward_by_token(_swap(q), _swap(k), _swap(v), t_out, t_lse, _swap(g), **statics)
    assert t_out.shape == (b, sq, h, d) and t_lse.shape == (b, h, sq)
    np.testing.assert_array_equal(np.asarray(_swap(t_out)), np.asarray(out))
    np.testing.assert_array_equal(np.asarray(_swap(t_visible)), np.asarray(out))
    np.testing.assert_array_equal(np.asarray(t_lse), np.asarray(lse))
    for name, a, t in zip(("dq", "dk", "dv"), grads, t_grads, strict=True):
        np.testing.assert_array_equal(np.asarray(_swap(t)), np.asarray(a), err_msg=name)


@given(
    b=st.integers(1, 2),
    kv_heads=st.integers(1, 2),
    group=st.sampled_from([1, 2, 3]),
    sq=st.integers(1, 300),
    extra_k=st.integers(0, 200),
    causal=st.booleans(),
    window=st.one_of(st.none(), st.integers(1, 200)),
    blocks=st.sampled_from([{}, {"block_q": 64, "block_k": 128}]),
    seed=st.integers(0, 2**31 - 1),
)
@hypothesis_settings(8, 40)
def test_by_token_equals_by_head(b, kv_heads, group, sq, extra_k, causal, window, blocks, seed):
    """Any batch, grouped heads, lengths no block divides, causal or not, a window: the by-token
    kernels' outputs and gradients are the by-head kernels', transposed, to the bit."""
    window = window if causal else None
    sk = sq + extra_k if (causal or window) else max(1, extra_k)
    _same(b, kv_heads * group, group, sq, sk, 128, {"causal": causal, "window": window, **blocks}, seed)


def test_head_dim_256_and_bf16_equal_by_head(fresh_seed):
    _same(1, 4, 2, 200, 200, 256, {"causal": True}, fresh_seed, jnp.bfloat16)


def test_empty_inputs_take_the_dense_path_in_their_layout():
    q = jnp.zeros((1, 0, 2, 128), jnp.float32)
    out, lse = pallas.attention_by_token(q, q, q)
    assert out.shape == (1, 0, 2, 128) and lse.shape == (1, 2, 0)


@pytest.mark.parametrize(
    "q, kv, match",
    [
        ((1, 16, 2, 64), (1, 16, 2, 64), "reads each head's 64 lanes in place, which needs head_dim a multiple of 128"),
        ((1, 16, 2, 128), (1, 16, 2), r"expected q \[batch, seq_q, heads, head_dim\] and k, v \[batch, seq_k, kv_heads"),
        ((1, 16, 3, 128), (1, 16, 2, 128), "k and v have 2 heads, which must divide q's 3"),
    ],
)
def test_by_token_argument_errors_name_the_layout(q, kv, match):
    with pytest.raises(ValueError, match=match):
        pallas.attention_by_token(jnp.ones(q), jnp.ones(kv), jnp.ones(kv))


def test_by_token_lowers_for_tpu_forward_and_backward():
    """The (rows, head_dim) windows of [batch, seq, heads * head_dim] are blocks Mosaic takes:
    the layer's shape (12 heads of 128, 2560 tokens), lowered for a v5e without one; the
    backward both fused (one kernel, the group's dQ a window of three heads' lanes) and as two."""
    q = jax.ShapeDtypeStruct((1, 2560, 12, 128), jnp.bfloat16)
    kv = jax.ShapeDtypeStruct((1, 2560, 4, 128), jnp.bfloat16)
    lse = jax.ShapeDtypeStruct((1, 12, 2560), jnp.float32)

    def backward(fused):
        return lambda q, k, v, o, lse, do: pallas._backward(
            q, k, v, o, lse, do, True, None, None, None, None, pallas.BY_TOKEN, fused=fused
        )

    with target.targeting(target.chip("v5e")):
        fwd = jax.jit(lambda q, k, v: pallas.attention_by_token(q, k, v, causal=True)).trace(q, kv, kv)
        bwds = [jax.jit(backward(fused)).trace(q, kv, kv, q, lse, q) for fused in (True, False)]
        texts = [f.lower(lowering_platforms=("tpu",)).as_text() for f in (fwd, *bwds)]
    assert [t.count("tpu_custom_call") for t in texts] == [1, 1, 2]
