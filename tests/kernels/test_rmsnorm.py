"""rmsnorm: forward saves inv_rms as a residual for its backward kernel."""

import jax
import pytest
import torch

from tests.helpers import FLOAT_DTYPES, assert_close, rand
from tests.kernels.base import KernelFamilyTests
from tests.kernels.checks import grid_semantics, lowers_for_tpu, opcheck
from tpu_kernels import testing
from tpu_kernels.errors import InvalidArgumentError, InvalidArgumentTypeError
from tpu_kernels.kernels import rmsnorm
from tpu_kernels.kernels.rmsnorm import pallas, reference


class TestRmsnorm(KernelFamilyTests):
    family = "rmsnorm"
    kernel_kwargs = {"block_rows": 64}  # the 300-row TEST shape spans 5 blocks, the last partial
    small_shape = "small"
    gradcheck_shape = (20, 128)
    zero_size_shapes = [(0, 8), (3, 0), (0, 0), (2, 0)]
    helion_shapes = ["small"]
    compile_shapes = [(8, 128), (300, 130), (5, 96)]

    def out_scale(self, shape, dtype):
        return 3  # x / rms(x) * w: unit-normal x and w give outputs up to about 3


def test_op_returns_the_residual():
    x, w = rand(10, 128), rand(128)
    y, inv_rms = rmsnorm.overload(x, w)
    assert inv_rms.shape == (10, 1) and inv_rms.dtype == torch.float32
    assert_close(inv_rms, torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + 1e-6), torch.float32)


def test_opcheck_with_eps():
    x, w = rand(40, 128, requires_grad=True), rand(128, requires_grad=True)
    opcheck(rmsnorm, (x, w), {"eps": 1e-5, "block_rows": 16})


def test_backward_kernel_lowers_for_tpu():
    x, w = jax.ShapeDtypeStruct((2048, 1024), "bfloat16"), jax.ShapeDtypeStruct((1024,), "bfloat16")
    lowers_for_tpu(rmsnorm.backward_op, x, w, jax.ShapeDtypeStruct((2048, 1), "float32"), x)


def test_a_zero_size_batch_dimension_keeps_its_shape():
    assert rmsnorm(torch.randn(2, 0, 16), torch.ones(16)).shape == (2, 0, 16)


def test_int32_is_refused_not_truncated():
    """Before the integer rule, rmsnorm(int32 [[3, 4]], ones(2)) returned [[0, 1]] (the float
    answer is [0.8485, 1.1314])."""
    with pytest.raises(InvalidArgumentTypeError, match="rmsnorm: argument 'x' has dtype int32"):
        rmsnorm(torch.tensor([[3, 4]], dtype=torch.int32), torch.ones(2))


def test_weight_shape_is_checked():
    with pytest.raises(InvalidArgumentError, match=r"rmsnorm: weight must have shape"):
        rmsnorm(rand(4, 128), rand(64))


# ---- numerics that bite (#16): magnitudes, eps, one rounding, residual dtypes, blocks ----


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_residual_dtype_for_every_input_dtype(dtype):
    """inv_rms is saved in float32 (float64 for float64 input) whatever x's dtype: a bf16
    residual would round 1/rms to 8 bits before the backward uses it."""
    x, w = rand(24, 128, dtype=dtype), rand(128, dtype=dtype)
    y, inv_rms = rmsnorm.overload(x, w)
    wide = torch.float64 if dtype == torch.float64 else torch.float32
    assert y.dtype == dtype and inv_rms.dtype == wide and inv_rms.shape == (24, 1)
    exact = torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + 1e-6)
    assert_close(inv_rms, exact, wide)  # float32 accuracy, not the input dtype's


@pytest.mark.parametrize("magnitude", [1e-3, 1e4])
def test_tiny_and_large_magnitudes(magnitude):
    """At |x| ~ 1e-3, mean(x^2) ~ 1e-6 is below eps = 1e-5: eps decides the output (without it
    y would be about 3x larger); at 1e4, x^2 ~ 1e8 stays finite in float32."""
    x, w = rand(40, 256, scale=magnitude), rand(256)
    y = rmsnorm(x, w, eps=1e-5)
    assert_close(y, reference.rmsnorm(x.double(), w.double(), eps=1e-5), torch.float32, scale=3)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_low_precision_is_float32_inside_with_one_rounding(dtype):
    x, w = rand(300, 256, dtype=dtype, scale=4), rand(256, dtype=dtype)
    y = rmsnorm(x, w, block_rows=64)
    testing.assert_ulps(y, reference.rmsnorm(x.double(), w.double()), ulps=1, what="rmsnorm")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_low_precision_backward_is_float32_inside(dtype):
    """dx within 1 ulp (+ float32's rounding of its cancellation); dw, summed over rows in
    permuted halves whose exact sum is zero, stays at float32's accumulation error: partial
    sums rounded to the input's dtype leave about 1e-2 there."""
    half = rand(256, 256, dtype=dtype)
    perm = torch.randperm(512)
    x = torch.cat([half, half])[perm]
    g = rand(256, 256, dtype=dtype)
    dy = torch.cat([g, -g])[perm]
    w = rand(256, dtype=dtype)
    _, r = rmsnorm.overload(x, w)
    dx, dw = rmsnorm.backward_op(x, w, r, dy, block_rows=8)
    x64, r64, dy64, w64 = x.double(), r.double(), dy.double(), w.double()
    xhat, gw = x64 * r64, dy64 * w64
    exact_dx = r64 * (gw - xhat * (gw * xhat).mean(-1, keepdim=True))
    testing.assert_ulps(dx, exact_dx, ulps=1, atol=1e-5, what="rmsnorm dx")
    assert dw.dtype == dtype and dw.double().abs().max() < 1e-3, dw.double().abs().max()


@pytest.mark.parametrize("block_rows", [1, 12, 100, 299, 300, 301])
def test_block_rows_not_multiples_of_8_and_at_the_boundaries(block_rows):
    x, w, g = rand(300, 128), rand(128), rand(300, 128)
    y, r = rmsnorm.overload(x, w, block_rows=block_rows)
    assert_close(y, reference.rmsnorm(x.double(), w.double()), torch.float32, scale=3)
    dx, dw = rmsnorm.backward_op(x, w, r, g, block_rows=block_rows)
    x64, w64 = (t.detach().double().requires_grad_(True) for t in (x, w))
    (reference.rmsnorm(x64, w64) * g.double()).sum().backward()
    assert_close(dx, x64.grad, torch.float32, scale=3)
    assert_close(dw, w64.grad, torch.float32, scale=40)


@pytest.mark.parametrize("rows, block_rows", [(300, 100), (50, 100)])
def test_odd_block_rows_lower_for_tpu(rows, block_rows):
    x, w = jax.ShapeDtypeStruct((rows, 256), "bfloat16"), jax.ShapeDtypeStruct((256,), "bfloat16")
    lowers_for_tpu(rmsnorm, x, w, block_rows=block_rows)
    r = jax.ShapeDtypeStruct((rows, 1), "float32")
    lowers_for_tpu(rmsnorm.backward_op, x, w, r, x, block_rows=block_rows)


def test_grid_is_declared_parallel():
    x, w = jax.ShapeDtypeStruct((512, 256), "bfloat16"), jax.ShapeDtypeStruct((256,), "bfloat16")
    r = jax.ShapeDtypeStruct((512, 1), "float32")
    assert grid_semantics(pallas.rmsnorm, x, w) == [("parallel",)]
    assert grid_semantics(pallas.rmsnorm_backward, x, w, r, x) == [("parallel",)]


@pytest.mark.parametrize("rows, block_rows", [(64, 8), (72, 8), (60, 8), (16, 16)])
def test_the_backward_matches_float64_under_the_tpu_interpreter(rows, block_rows):
    """The backward under the TPU interpreter with VMEM and outputs poisoned with NaN and race
    detection: an even and an odd step count (64 and 72 rows), a padded last block (60) and a
    one-step grid (16) all give float64's dx and dw, every step's dw partial written."""
    import numpy as np
    from jax.experimental.pallas import tpu as pltpu

    seed = int(np.random.default_rng().integers(2**31))
    print(f"seed={seed}")
    rng = np.random.default_rng(seed)
    x, dy = rng.standard_normal((2, rows, 256), dtype=np.float32)
    w = rng.standard_normal(256, dtype=np.float32)
    r = 1 / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-6)
    params = pltpu.InterpretParams(uninitialized_memory="nan", detect_races=True)
    with pltpu.force_tpu_interpret_mode(params):
        dx, dw = pallas.rmsnorm_backward(x, w, r.astype(np.float32), dy, block_rows=block_rows)
    xhat, g = x * r, dy * w.astype(np.float64)
    want_dx = r * (g - xhat * (g * xhat).mean(-1, keepdims=True))
    want_dw = (dy * xhat).sum(0)
    np.testing.assert_allclose(np.asarray(dx), want_dx, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(dw), want_dw, rtol=1e-5, atol=1e-4 * np.sqrt(rows))
