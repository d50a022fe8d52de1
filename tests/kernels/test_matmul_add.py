"""The residual epilogue of matmul's kernels: `pallas.matmul_add` (a @ b + c) and
`gated.swiglu_matmul_add` ((silu(gate) * up) @ w + c), in Pallas' TPU interpreter against
float64 on the host. The accumulator starts from c's tile, so every path of the kernel starts
from it: one K step (the product written at once), several (c at the first), a masked K tail,
partial edge blocks along M and N, and a float32 result that accumulates in its output block."""

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from jax.experimental.pallas import tpu as pltpu

from tests.helpers import hypothesis_settings
from tpu_kernels.kernels.matmul import gated, pallas

# normwise against float64: a float32-accumulated product and sum rounded once to the dtype (the
# gated one also rounds h to it first)
BOUND = {jnp.float32: 1e-5, jnp.bfloat16: 1.2e-2}


def _f64(x):
    return np.asarray(jnp.asarray(x, jnp.float32), np.float64)


def _normwise(got, want) -> float:
    return float(np.linalg.norm(_f64(got) - want) / max(np.linalg.norm(want), 1e-300))


def _operands(seed, m, k, n, dtype):
    rng = np.random.default_rng(seed)

    def r(*shape, scale=1.0):
        return jnp.asarray(rng.standard_normal(shape) * scale, dtype)

    return r(m, k), r(m, k), r(k, n, scale=k**-0.5), r(m, n)


def _check(m, k, n, dtype, blocks_, seed):
    a, u, b, c = _operands(seed, m, k, n, dtype)
    with pltpu.force_tpu_interpret_mode():
        out = pallas.matmul_add(a, b, c, **blocks_)
        gated_out = gated.swiglu_matmul_add(a, u, b, c, **blocks_)
    g = _f64(a)
    h = g / (1.0 + np.exp(-g)) * _f64(u)
    for name, got, want in (("matmul_add", out, _f64(a) @ _f64(b) + _f64(c)),
                            ("swiglu_matmul_add", gated_out, h @ _f64(b) + _f64(c))):
        assert got.shape == (m, n) and got.dtype == dtype, name
        err = _normwise(got, want)
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
def test_the_sum_matches_float64_at_any_shape(m, k, n, dtype, given_blocks, seed):
    """The default blocks (one K step at these sizes), or small ones: partial edge blocks along
    M and N and a masked K tail."""
    _check(m, k, n, dtype, dict(block_m=16, block_n=128, block_k=128) if given_blocks else {}, seed)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("block_k", [128, 256, 384])
def test_c_enters_once_whatever_the_k_steps(dtype, block_k, fresh_seed):
    """K = 384: three steps, two with a tail of 128, or one; c's tile is the sum's start, not
    added at each step or dropped at the one-step write."""
    _check(40, 384, 256, dtype, dict(block_m=16, block_n=128, block_k=block_k), fresh_seed)


def test_c_of_another_shape_or_dtype_is_refused():
    a = jnp.ones((8, 128), jnp.float32)
    b = jnp.ones((128, 256), jnp.float32)
    with pytest.raises(ValueError, match=r"matmul_add: expected c \[8, 256\] of a's dtype float32"):
        pallas.matmul_add(a, b, jnp.ones((8, 128), jnp.float32))
    with pytest.raises(ValueError, match=r"swiglu_matmul_add: expected c \[8, 256\] of gate's dtype float32"):
        gated.swiglu_matmul_add(a, a, b, jnp.ones((8, 256), jnp.bfloat16))


def test_an_empty_contraction_gives_c():
    c = jnp.arange(12.0, dtype=jnp.float32).reshape(3, 4)
    a, b = jnp.zeros((3, 0), jnp.float32), jnp.zeros((0, 4), jnp.float32)
    np.testing.assert_array_equal(pallas.matmul_add(a, b, c), c)
    np.testing.assert_array_equal(gated.swiglu_matmul_add(a, a, b, c), c)
