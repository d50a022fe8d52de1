"""attention's fused backward (`pallas._dkv_kernel` with `dq_layout`: dQ accumulated in the
dK/dV kernel) in Pallas' TPU interpreter: the same dQ, dK and dV as the two kernels, bit for bit (each dQ row
sums the same products in the same kv-block order), and within float32 accumulation of a
float64 reference; over both walks (the causal table and the rectangle), grouped heads, a
window, ragged queries and padded keys, and both layouts. The op's tests
(tests/kernels/test_attention.py) run whichever the default takes at their sizes: fused."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from jax.experimental.pallas import tpu as pltpu

from tests.helpers import hypothesis_settings
from tpu_kernels.kernels.attention import pallas, reference

BOUND = {jnp.float32: 2e-5, jnp.bfloat16: 2e-2}  # normwise, against float64


def _inputs(seed, b, h, hk, sq, sk, d, dtype):
    rng = np.random.default_rng(seed)
    q, g = (jnp.asarray(rng.standard_normal((b, h, sq, d)), dtype) for _ in range(2))
    k, v = (jnp.asarray(rng.standard_normal((b, hk, sk, d)), dtype) for _ in range(2))
    return q, k, v, g


def _float64_grads(q, k, v, g, causal, window):
    wide = [torch.from_numpy(np.asarray(jnp.asarray(x, jnp.float32), np.float64)) for x in (q, k, v, g)]
    q, k, v = (x.requires_grad_(True) for x in wide[:3])
    out = reference.attention(q, k, v, causal=causal, window=window)
    return [x.numpy() for x in torch.autograd.grad((out * wide[3]).sum(), (q, k, v))]


def _check(shape, causal, window, blocks, layout, dtype, seed):
    q, k, v, g = _inputs(seed, *shape, dtype)
    bq, bk = blocks
    with pltpu.force_tpu_interpret_mode():
        out, lse = pallas.attention(q, k, v, causal=causal, window=window, block_q=bq, block_k=bk)
        turn = (lambda x: jnp.swapaxes(x, 1, 2)) if layout == pallas.BY_TOKEN else (lambda x: x)
        grads = {
            fused: [
                turn(x)
                for x in pallas._backward(*map(turn, (q, k, v, out)), lse, turn(g), causal, None, window, bq, bk,
                                          layout, fused=fused)
            ]
            for fused in (True, False)
        }
    want = _float64_grads(q, k, v, g, causal, window)
    for name, a, b, w in zip("qkv", grads[True], grads[False], want):
        np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32), err_msg=f"d{name}")
        # normwise, or against unit entries where the gradient is (near) zero: one key per query
        # gives dQ = dK = 0 exactly, which the kernels meet to rounding
        err = np.linalg.norm(np.asarray(a, np.float64) - w) / max(np.linalg.norm(w), np.sqrt(w.size))
        assert err < BOUND[dtype], (f"d{name}", err, shape, causal, window, blocks, layout)


CASES = {  # shape (b, h, hk, sq, sk, d), causal, window, (block_q, block_k), layout
    "causal table, ragged": ((1, 4, 2, 200, 200, 128), True, None, (64, 128), pallas.BY_HEAD),
    "rectangle, padded keys": ((2, 2, 1, 100, 200, 64), False, None, (64, 128), pallas.BY_HEAD),
    "window, MQA": ((1, 4, 1, 300, 300, 128), True, 70, (64, 128), pallas.BY_HEAD),
    "by token, grouped": ((1, 6, 2, 200, 200, 128), True, None, (64, 128), pallas.BY_TOKEN),
    "one block each": ((1, 2, 1, 136, 136, 128), True, None, (None, None), pallas.BY_HEAD),
}


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_fused_backward_is_the_two_kernels_bit_for_bit(case, dtype):
    _check(*CASES[case], dtype, seed=len(case))


@given(
    group=st.sampled_from([1, 2, 3]),
    hk=st.integers(1, 2),
    sq=st.integers(1, 300),
    extra_k=st.integers(0, 100),
    causal=st.booleans(),
    window=st.sampled_from([None, 1, 40]),
    blocks=st.sampled_from([(8, 128), (64, 128), (128, 256), (None, None)]),
    seed=st.integers(0, 2**31 - 1),
)
@hypothesis_settings(examples=6, random_examples=20)
def test_fused_backward_over_lengths_groups_and_masks(group, hk, sq, extra_k, causal, window, blocks, seed):
    window = window if causal else None
    sk = sq + extra_k if window is None else sq  # a window needs seq_q <= seq_k; keep it square
    _check((1, group * hk, hk, sq, sk, 64), causal, window, blocks, pallas.BY_HEAD, jnp.float32, seed)


def test_the_default_fuses_where_the_fused_kernels_vmem_need_fits():
    """`_fused_fits`: the short draws and the qwen2.5-1.5b layer's 2560 tokens fuse (their
    group's dQ a few MiB to 16); qwen2-7b's seven q heads per kv head at 2944 and 4352 tokens,
    and a 32-head layer at 8192, need more VMEM than `_vmem.fits` allows and run two kernels."""

    def fits(h, hk, t, d, dtype=jnp.bfloat16):
        q, k = (jax.ShapeDtypeStruct((1, n, t, d), dtype) for n in (h, hk))
        plan = pallas._plan(q, k, True, None, None, None, forward=False)
        return pallas._fused_fits(plan, d, jnp.dtype(dtype).itemsize)

    assert fits(8, 4, 1408, 256) and fits(12, 2, 1280, 128, jnp.float32) and fits(32, 8, 1408, 64)
    assert fits(12, 2, 2560, 128)
    assert not fits(28, 4, 2944, 128) and not fits(28, 4, 4352, 128) and not fits(32, 8, 8192, 128)
