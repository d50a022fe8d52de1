"""scale_add: x + alpha * y, a Pallas kernel with a custom_vjp backward."""

import jax
import pytest
import torch

from tests.helpers import assert_close, rand
from tests.kernels.base import KernelFamilyTests
from tests.kernels.checks import grid_semantics, lowers_for_tpu, opcheck
from tpu_kernels import testing
from tpu_kernels.kernels import scale_add
from tpu_kernels.kernels.scale_add import pallas, reference


class TestScaleAdd(KernelFamilyTests):
    family = "scale_add"  # its registered kwargs call it with alpha = 0.5
    kernel_kwargs = {"block_rows": 64}  # the 300-row TEST shape spans 5 blocks, the last partial
    small_shape = "matrix"
    gradcheck_shape = ((4, 16, 128), (4, 1, 128))  # with broadcasting
    zero_size_shapes = [((0, 8), (0, 8)), ((3, 0), (3, 0)), ((0, 0), (0, 0)), ((2, 0), (0,))]
    helion_shapes = ["matrix"]
    compile_shapes = [((64, 256), (64, 256)), ((300, 130), (1, 130)), ((7, 33), (7, 33))]

    def out_scale(self, shape, dtype):
        return 2  # x + alpha * y of unit-normal x and y


def test_opcheck_with_gradients_and_broadcasting():
    opcheck(scale_add, (rand(16, 128, requires_grad=True), rand(16, 128, requires_grad=True)), {"alpha": 2.0})
    opcheck(scale_add, (rand(40, 256), rand(256)), {"block_rows": 16})


# ---- numerics that bite (#16): one rounding, cancellation, range, blocks ---------------


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_low_precision_cancellation_is_exact_in_float32(dtype):
    """x = -(alpha * y) rounded, plus a small d: in float32 x + alpha * y is exact (alpha =
    0.75 has 2 significant bits), so the one rounding at the end gives exactly the rounded
    exact result; computing in the input's dtype rounds alpha * y first, an error of up to
    half an ulp of |x| (~1e3) in a result of size ~1."""
    y = rand(64, 256, dtype=dtype, scale=1000)
    d = rand(64, 256, dtype=dtype)
    x = (-(0.75 * y.double()) + d.double()).to(dtype)
    out = scale_add(x, y, alpha=0.75)
    exact = x.double() + 0.75 * y.double()
    torch.testing.assert_close(out.double(), testing.one_rounding(exact, dtype), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_low_precision_is_float32_inside_with_one_rounding(dtype):
    x, y = rand(300, 256, dtype=dtype), rand(300, 256, dtype=dtype)
    # atol: float32's rounding of 0.3 * y and of the sum (~1e-7 at |x| ~ 1) where x + 0.3 y cancels
    exact = x.double() + 0.3 * y.double()
    testing.assert_ulps(scale_add(x, y, alpha=0.3), exact, ulps=1, atol=1e-6, what="scale_add")


@pytest.mark.parametrize("magnitude", [1e-30, 1e30])
def test_tiny_and_large_magnitudes_in_float32(magnitude):
    x, y = rand(40, 256, scale=magnitude), rand(40, 256, scale=magnitude)
    # float32 stays relative at 1e-30 (far above its smallest normal, 1.2e-38) and at 1e30
    exact = x.double() - 2.5 * y.double()
    out = scale_add(x, y, alpha=-2.5)
    assert torch.isfinite(out).all() and (out != 0).all()
    assert_close(out, exact, torch.float32, scale=2 * magnitude)


@pytest.mark.parametrize("block_rows", [1, 12, 100, 299, 300, 301])
def test_block_rows_not_multiples_of_8_and_at_the_boundaries(block_rows):
    x, y = rand(300, 128), rand(300, 128)
    out = scale_add(x, y, alpha=0.5, block_rows=block_rows)
    assert_close(out, reference.scale_add(x.double(), y.double(), alpha=0.5), torch.float32, scale=2)


@pytest.mark.parametrize("rows, block_rows", [(300, 100), (50, 100)])
def test_odd_block_rows_lower_for_tpu(rows, block_rows):
    spec = jax.ShapeDtypeStruct((rows, 256), "bfloat16")
    lowers_for_tpu(scale_add, spec, spec, block_rows=block_rows)


def test_grid_is_declared_parallel():
    spec = jax.ShapeDtypeStruct((512, 256), "bfloat16")
    assert grid_semantics(pallas.scale_add, spec, spec) == [("parallel",)]


def test_backward_gradients_are_exact_in_float64():
    """d/dy of x + alpha * y is alpha * g, by the same kernel: checked in float64 at alpha = -1.5."""
    x, y = (
        rand(16, 128, dtype=torch.float64, requires_grad=True),
        rand(16, 128, dtype=torch.float64, requires_grad=True),
    )
    g = rand(16, 128, dtype=torch.float64)
    (scale_add(x, y, alpha=-1.5) * g).sum().backward()
    torch.testing.assert_close(y.grad, -1.5 * g, rtol=1e-12, atol=0)
    torch.testing.assert_close(x.grad, g, rtol=1e-12, atol=0)


@pytest.mark.parametrize(
    "x_dtype, y_dtype",
    [(torch.bfloat16, torch.float32), (torch.float32, torch.bfloat16), (torch.float16, torch.bfloat16)],
    ids=str,
)
def test_mixed_dtypes_promote_as_torch_does(x_dtype, y_dtype):
    """bf16 x + f32 y is f32 in torch (bf16 + f16 too): the result has torch's promoted dtype
    and the promoted dtype's accuracy; each gradient has its input's dtype."""
    x, y = rand(64, 256, dtype=x_dtype, requires_grad=True), rand(256, dtype=y_dtype, requires_grad=True)
    out = scale_add(x, y, alpha=0.75)
    promoted = reference.scale_add(x.detach(), y.detach(), alpha=0.75).dtype  # torch's own promotion
    assert out.dtype == promoted == torch.promote_types(x_dtype, y_dtype)
    assert_close(out, reference.scale_add(x.double(), y.double(), alpha=0.75), promoted, scale=2)
    g = rand(64, 256, dtype=promoted)
    out.backward(g)
    assert x.grad.dtype == x_dtype and y.grad.dtype == y_dtype
    assert_close(x.grad, g.double(), x_dtype)
    assert_close(y.grad, 0.75 * g.double().sum(0), y_dtype, scale=16)  # a sum over 64 rows


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_jax_backward_reads_g_once_and_keeps_no_inputs(dtype):
    """The JAX half's custom_vjp: its residuals are zero-size stand-ins for x's and y's shapes
    (the inputs are not kept alive until the backward), d/dy is alpha * g by a one-input kernel
    (not x + alpha * g over a zeros array, which would write the zeros and read them back), and
    both gradients match float64 with y broadcast along the rows."""
    import numpy as np
    from jax.experimental.pallas import tpu as pltpu

    seed = int(np.random.default_rng().integers(2**31))
    print(f"seed={seed}")
    rng = np.random.default_rng(seed)
    x, g = (jax.numpy.asarray(rng.standard_normal((64, 256)), dtype) for _ in range(2))
    y = jax.numpy.asarray(rng.standard_normal(256), dtype)
    with pltpu.force_tpu_interpret_mode(True):
        out, vjp = jax.vjp(lambda a, b: pallas.scale_add(a, b, alpha=-1.5), x, y)
        assert all(leaf.size == 0 for leaf in jax.tree_util.tree_leaves(vjp))
        calls = [e for e in jax.make_jaxpr(vjp)(g).jaxpr.eqns if e.primitive.name == "pallas_call"]
        assert [len(e.invars) for e in calls] == [1]
        gx, gy = vjp(g)
    g64 = np.asarray(g, np.float64)
    tol = 1e-6 if dtype == "float32" else 1e-2
    assert gx.dtype == x.dtype and gy.dtype == y.dtype and gy.shape == (256,)
    np.testing.assert_array_equal(np.asarray(gx, np.float64), g64)
    np.testing.assert_allclose(np.asarray(gy, np.float64), -1.5 * g64.sum(0), rtol=tol, atol=tol * 8)
