"""attention's causal diagonal blocks in row chunks (`pallas._run`, `Plan.sub`: each chunk of
sub rows reads only the keys up to its last row, chunks past seq_q skipped) in Pallas' TPU
interpreter: the forward and both backwards within float32 accumulation of a float64 reference
at chunks of 128 and 256, the fused backward still bitwise the two kernels, over ragged
queries, padded keys, a window, grouped heads, one block over the whole sequence and both
layouts; and the default rule (`_diagonal`, `_whole`) at the drawn shapes the chip measured."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from jax.experimental.pallas import tpu as pltpu

from tests.helpers import hypothesis_settings
from tests.kernels.test_attention_fused import BOUND, _float64_grads, _inputs
from tpu_kernels.kernels.attention import pallas, reference


def _float64_out(q, k, v, causal, window):
    wide = [torch.from_numpy(np.asarray(jnp.asarray(x, jnp.float32), np.float64)) for x in (q, k, v)]
    return reference.attention(*wide, causal=causal, window=window).numpy()


def _err(a, want):
    a = np.asarray(jnp.asarray(a, jnp.float32), np.float64)
    return np.linalg.norm(a - want) / max(np.linalg.norm(want), np.sqrt(want.size))


def _check(shape, window, block, sub, layout, dtype, seed, require_chunks=True):
    q, k, v, g = _inputs(seed, *shape, dtype)
    turn = (lambda x: jnp.swapaxes(x, 1, 2)) if layout == pallas.BY_TOKEN else (lambda x: x)
    plan = pallas._plan(q, k, True, window, block, block, forward=True, sub=sub)
    print(f"plan {plan}")  # which path a Hypothesis example took
    assert plan.sub == sub or not require_chunks, plan  # the chunks run: not a whole-block case by accident
    with pltpu.force_tpu_interpret_mode():
        out, lse = pallas._forward(*map(turn, (q, k, v)), True, None, window, block, block, True, layout, sub=sub)
        out = turn(out)
        grads = {
            fused: [
                turn(x)
                for x in pallas._backward(*map(turn, (q, k, v, out)), lse, turn(g), True, None, window, block, block,
                                          layout, fused=fused, sub=sub)
            ]
            for fused in (True, False)
        }
    assert _err(out, _float64_out(q, k, v, True, window)) < BOUND[dtype]
    for name, a, b, w in zip("qkv", grads[True], grads[False], _float64_grads(q, k, v, g, True, window)):
        np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32), err_msg=f"d{name}")
        assert _err(a, w) < BOUND[dtype], (f"d{name}", shape, window, block, sub, layout)


CASES = {  # shape (b, h, hk, sq, sk, d), window, block, sub, layout
    "ragged, chunks past seq_q": ((1, 4, 2, 600, 600, 128), None, 512, 128, pallas.BY_HEAD),
    "chunks of 256, grouped": ((1, 6, 2, 1100, 1100, 64), None, 512, 256, pallas.BY_HEAD),
    "padded keys, more keys than queries": ((1, 2, 1, 300, 400, 128), None, 256, 128, pallas.BY_HEAD),
    "fewer keys than queries": ((1, 2, 1, 500, 300, 64), None, 256, 128, pallas.BY_HEAD),
    "window inside the diagonal": ((1, 2, 1, 700, 700, 128), 100, 256, 128, pallas.BY_HEAD),
    "one block, the whole sequence": ((2, 2, 1, 640, 640, 128), None, 640, 128, pallas.BY_HEAD),
    "by token": ((1, 4, 2, 700, 700, 128), None, 512, 256, pallas.BY_TOKEN),
}


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_chunked_diagonal_against_float64(case, dtype):
    _check(*CASES[case], dtype, seed=len(case))


@given(
    group=st.sampled_from([1, 2, 3]),
    sq=st.integers(1, 1100),
    extra_k=st.integers(-100, 100),
    window=st.sampled_from([None, 1, 200]),
    blocks=st.sampled_from([(256, 128), (512, 128), (512, 256)]),
    seed=st.integers(0, 2**31 - 1),
)
@hypothesis_settings(examples=6, random_examples=16)
def test_chunked_diagonal_over_lengths_groups_and_windows(group, sq, extra_k, window, blocks, seed):
    """Where the blocks cannot take the chunks (a block past a sequence is the whole sequence,
    which the chunk may not divide, or q's and k's blocks differ) `_diagonal` gives 0 and the
    call runs whole blocks: checked against float64 the same."""
    sk = max(1, sq + extra_k) if window is None else sq  # a window needs seq_q <= seq_k; keep it square
    _check((1, group, 1, sq, sk, 64), window, *blocks, pallas.BY_HEAD, jnp.float32, seed, require_chunks=False)


def _plans(h, hk, t, d, causal=True, window=None):
    q, k = (jax.ShapeDtypeStruct((1, n, t, d), jnp.bfloat16) for n in (h, hk))
    return tuple((p.bq, p.sub) for p in (pallas._plan(q, k, causal, window, None, None, forward=f) for f in (True, False)))


def test_the_default_rule_at_the_drawn_shapes():
    """Chunks of 256 where 256 divides a square block into two or more; one block over a causal
    square of 1025-1536 tokens in 128s at head_dim up to 128, in chunks of 256 where they divide
    it, else 128; head_dim 256 keeps its blocks; no chunks without a causal mask, on blocks the
    chunk does not divide (640 with a window: not one block), or on a single block neither
    divides."""
    assert _plans(12, 2, 1280, 128) == ((1280, 256), (1280, 256))  # qwen2.5-1.5b
    assert _plans(32, 8, 1408, 64) == ((1408, 128), (1408, 128))  # llama-3.2-1b
    assert _plans(8, 4, 1408, 256) == ((512, 256), (512, 256))  # gemma-2-2b
    assert _plans(32, 8, 3000, 128) == ((512, 256), (1024, 256))  # llama-3-8b
    assert _plans(32, 8, 1664, 128) == ((512, 256), (1024, 256))  # past WHOLE
    assert _plans(8, 4, 1536, 256) == ((512, 256), (768, 256))
    assert _plans(8, 4, 1000, 128) == ((1000, 0), (1000, 0))
    assert _plans(8, 4, 640, 128) == ((640, 128), (640, 128))
    assert _plans(8, 4, 1280, 128, causal=False) == ((512, 0), (640, 0))
    assert _plans(8, 4, 1280, 128, window=300) == ((512, 256), (640, 0))
