"""Softmax's wide rows walked in column chunks (`softmax.pallas.chunk_for`) at every width that is
a multiple of 128 lanes, up to the widest row the chip runner measures (issue 59).

A width of 128 x p with p a prime above 64 has no divisor between 2 and 64 lane groups: a search
that stopped at two groups found none there, and softmax at [8, 8576] (128 x 67) raised
StopIteration while tracing. Such widths, and any whose largest dividing chunk is narrow, now walk
CHUNK-wide chunks and a narrower last one."""

import jax.numpy as jnp
import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st
from jax.experimental.pallas import tpu as pltpu

from tests.kernels.test_vmem_defaults import _assert_softmax_matches_float64, _logits_and_grad
from tpu_kernels.kernels.softmax import pallas as sm
from tpu_kernels.kernels.softmax.shapes import CHIP as CHIP_SHAPES

WIDEST = max(cols for _, cols in CHIP_SHAPES)  # 262144: 128 x 2048 lanes
GROUPS = WIDEST // 128
# lane-group counts with no divisor up to CHUNK's 64 groups: each takes 128-lane chunks
PRIMES_PAST_CHUNK = [
    p for p in range(sm.CHUNK // 128 + 1, GROUPS + 1) if all(p % d for d in range(2, int(p**0.5) + 1))
]


def test_every_lane_multiple_width_gets_its_largest_dividing_chunk_or_a_tail():
    """Every width 128 x p up to the widest measured row, primes and composites: none up to
    CHUNK columns (the whole row at once), else the largest multiple of 128 lanes, at most
    CHUNK, that divides the row where it is at least MIN_DIVIDING_CHUNK, and CHUNK (a narrower
    last chunk) otherwise, as at every prime above 64 groups."""
    assert WIDEST == 262144 and len(PRIMES_PAST_CHUNK) > 280
    for p in range(1, GROUPS + 1):
        cols = 128 * p
        chunk = sm.chunk_for(cols)
        if cols <= sm.CHUNK:
            assert chunk is None, cols
            continue
        dividing = max(c for c in range(128, sm.CHUNK + 1, 128) if cols % c == 0)
        want = dividing if dividing >= sm.MIN_DIVIDING_CHUNK else sm.CHUNK
        assert chunk == want, (cols, chunk)
    assert {sm.chunk_for(128 * p) for p in PRIMES_PAST_CHUNK} == {sm.CHUNK}
    assert sm.chunk_for(128256) == sm.CHUNK and sm.chunk_for(152064) == 6912


@settings(max_examples=10, deadline=None)
@given(
    groups=st.one_of(st.sampled_from(PRIMES_PAST_CHUNK), st.integers(1, GROUPS)),
    rows=st.integers(1, 5),
    dtype=st.sampled_from(["float32", "bfloat16"]),
    seed=st.integers(0, 2**31 - 1),
)
@example(groups=67, rows=8, dtype="float32", seed=0)  # issue 59's [8, 8576]
@example(groups=1002, rows=3, dtype="bfloat16", seed=1)  # Llama 3's vocabulary, 128256: a 5376-column tail
def test_softmax_is_right_at_every_lane_multiple_width(groups, rows, dtype, seed):
    """Forward and backward at their defaults, width 128 x `groups` (a prime above 64 half the
    time), against float64: whole-row blocks whose body walks the row in chunks past CHUNK
    columns (the backward stages the widest float32 rows in VMEM instead)."""
    print(f"seed={seed}")
    cols = 128 * groups
    x, dy = _logits_and_grad(np.random.default_rng(seed), rows, cols, dtype)
    chunk = sm.chunk_for(cols)
    assert (chunk is None) == (cols <= sm.CHUNK)
    with pltpu.force_tpu_interpret_mode(True):
        y = sm.softmax(x)
        dx = sm.softmax_backward(y, dy)
    assert y.dtype == dx.dtype == jnp.dtype(dtype)
    _assert_softmax_matches_float64(x, y, dy, dx, 2e-6 if dtype == "float32" else 1e-2)
