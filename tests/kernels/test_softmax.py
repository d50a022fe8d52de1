"""softmax: a row-wise Pallas kernel with an explicit backward kernel."""

import jax
import pytest
import torch

from tests.helpers import FLOAT_DTYPES, assert_close, rand
from tests.kernels.checks import compile_matches_eager, lowers_for_tpu, opcheck
from tpu_kernels.kernels import softmax
from tpu_kernels.kernels.softmax import pallas, reference, shapes


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("name", list(shapes.TEST))
def test_matches_float64_reference(name, dtype):
    x = rand(*shapes.TEST[name], dtype=dtype, scale=3)
    out = softmax(x, block_rows=64)
    assert out.dtype == dtype
    assert_close(out, reference.softmax(x.double()), dtype)


def test_explicit_backward_kernel_is_its_own_op():
    assert softmax.backward_op.name == "tpu_kernels::softmax_backward"
    assert softmax.backward_op.fn is pallas.softmax_backward


def test_gradcheck():
    x = rand(24, 128, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: softmax(t, block_rows=8), (x,))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_gradients_match_torch_autograd(dtype):
    x, g = rand(300, 256, dtype=dtype, requires_grad=True), rand(300, 256, dtype=dtype)
    (softmax(x) * g).sum().backward()
    ours = x.grad
    x64 = x.detach().double().requires_grad_(True)
    (reference.softmax(x64) * g.double()).sum().backward()
    assert_close(ours, x64.grad, dtype)


def test_opcheck():
    opcheck(softmax, (rand(40, 128, requires_grad=True),), {"block_rows": 16})
    opcheck(softmax.backward_op, (rand(8, 128), rand(8, 128)))


def test_compile_fullgraph_matches_eager():
    def model(x, w):
        return (softmax(x @ w) * w.sum()).sum()

    compile_matches_eager(model, [rand(16, 128, requires_grad=True), rand(128, 128, requires_grad=True)])


def test_lowers_for_tpu():
    spec = jax.ShapeDtypeStruct((1024, 512), "bfloat16")
    lowers_for_tpu(softmax, spec)
    lowers_for_tpu(softmax.backward_op, spec, spec)


def test_rejects_integer_input():
    with pytest.raises(Exception, match="softmax: argument .x. has dtype int32"):
        softmax(torch.ones(4, 8, dtype=torch.int32))
