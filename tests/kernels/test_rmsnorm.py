"""rmsnorm: forward saves inv_rms as a residual for its backward kernel."""

import jax
import pytest
import torch

from tests.helpers import FLOAT_DTYPES, assert_close, rand
from tests.kernels.checks import compile_matches_eager, lowers_for_tpu, opcheck
from tpu_kernels.kernels import rmsnorm
from tpu_kernels.kernels.rmsnorm import reference, shapes


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("name", list(shapes.TEST))
def test_matches_float64_reference(name, dtype):
    shape = shapes.TEST[name]
    x, w = rand(*shape, dtype=dtype), rand(shape[-1], dtype=dtype)
    y = rmsnorm(x, w, eps=1e-5, block_rows=64)
    assert isinstance(y, torch.Tensor) and y.dtype == dtype  # the residual is not returned
    assert_close(y, reference.rmsnorm(x.double(), w.double(), eps=1e-5), dtype, scale=3)


def test_op_returns_the_residual():
    x, w = rand(10, 128), rand(128)
    y, inv_rms = rmsnorm.overload(x, w)
    assert inv_rms.shape == (10, 1) and inv_rms.dtype == torch.float32
    assert_close(inv_rms, torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + 1e-6), torch.float32)


def test_gradcheck():
    x = rand(20, 128, dtype=torch.float64, requires_grad=True)
    w = rand(128, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: rmsnorm(a, b, block_rows=8), (x, w))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_gradients_match_torch_autograd(dtype):
    x, w = rand(300, 256, dtype=dtype, requires_grad=True), rand(256, dtype=dtype, requires_grad=True)
    g = rand(300, 256, dtype=dtype)
    (rmsnorm(x, w) * g).sum().backward()
    gx, gw = x.grad, w.grad
    x64, w64 = (t.detach().double().requires_grad_(True) for t in (x, w))
    (reference.rmsnorm(x64, w64) * g.double()).sum().backward()
    assert_close(gx, x64.grad, dtype, scale=3)
    assert_close(gw, w64.grad, dtype, scale=40)  # a sum over 300 rows


def test_opcheck():
    x, w = rand(40, 128, requires_grad=True), rand(128, requires_grad=True)
    opcheck(rmsnorm, (x, w), {"eps": 1e-5, "block_rows": 16})


def test_compile_fullgraph_matches_eager():
    def model(x, w):
        return rmsnorm(x * 2, w).square().mean()

    compile_matches_eager(model, [rand(24, 128, requires_grad=True), rand(128, requires_grad=True)])


def test_lowers_for_tpu():
    x, w = jax.ShapeDtypeStruct((2048, 1024), "bfloat16"), jax.ShapeDtypeStruct((1024,), "bfloat16")
    lowers_for_tpu(rmsnorm, x, w)
    lowers_for_tpu(rmsnorm.backward_op, x, w, jax.ShapeDtypeStruct((2048, 1), "float32"), x)


def test_weight_shape_is_checked():
    with pytest.raises(Exception, match=r"rmsnorm: weight must have shape"):
        rmsnorm(rand(4, 128), rand(64))
