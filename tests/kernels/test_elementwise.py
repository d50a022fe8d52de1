"""scale_add: x + alpha * y, a Pallas kernel with a custom_vjp backward."""

import jax
import pytest
import torch

from tests.helpers import FLOAT_DTYPES, assert_close, rand
from tests.kernels.checks import compile_matches_eager, lowers_for_tpu, opcheck
from tpu_kernels.kernels import scale_add
from tpu_kernels.kernels.elementwise import reference, shapes


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("name", list(shapes.TEST))
def test_matches_float64_reference(name, dtype):
    xs, ys = shapes.TEST[name]
    x, y = rand(*xs, dtype=dtype), rand(*ys, dtype=dtype)
    out = scale_add(x, y, alpha=0.75)
    assert out.dtype == dtype and out.shape == torch.broadcast_shapes(xs, ys)
    assert_close(out, reference.scale_add(x.double(), y.double(), alpha=0.75), dtype, scale=2)


def test_gradcheck_with_broadcasting():
    x = rand(4, 16, 128, dtype=torch.float64, requires_grad=True)
    y = rand(4, 1, 128, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: scale_add(a, b, alpha=-1.5), (x, y))


def test_gradients_match_torch_autograd_in_float32():
    x, y = rand(64, 256, requires_grad=True), rand(256, requires_grad=True)
    g = rand(64, 256)
    (scale_add(x, y, alpha=0.3) * g).sum().backward()
    gx, gy = x.grad, y.grad
    x.grad = y.grad = None
    (reference.scale_add(x, y, alpha=0.3) * g).sum().backward()
    assert_close(gx, x.grad.double(), torch.float32)
    assert_close(gy, y.grad.double(), torch.float32, scale=16)


def test_opcheck():
    opcheck(scale_add, (rand(16, 128, requires_grad=True), rand(16, 128, requires_grad=True)), {"alpha": 2.0})
    opcheck(scale_add, (rand(40, 256), rand(256)), {"block_rows": 16})


def test_compile_fullgraph_matches_eager():
    def model(x, y):
        return scale_add(x.relu(), y, alpha=0.5).pow(2).mean()

    compile_matches_eager(model, [rand(32, 128, requires_grad=True), rand(32, 128, requires_grad=True)])


def test_lowers_for_tpu():
    lowers_for_tpu(
        scale_add,
        jax.ShapeDtypeStruct((512, 1024), "bfloat16"),
        jax.ShapeDtypeStruct((512, 1024), "bfloat16"),
        alpha=2.0,
    )
