"""matmul: a tiled Pallas kernel (float32 VMEM accumulator) with a reference-derived backward."""

import math

import jax
import pytest
import torch

from tests.helpers import FLOAT_DTYPES, assert_close, rand
from tests.kernels.checks import compile_matches_eager, lowers_for_tpu, opcheck
from tpu_kernels.kernels import matmul
from tpu_kernels.kernels.matmul import reference, shapes
from tpu_kernels.testing import dot_scale


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("name", list(shapes.TEST))
def test_matches_float64_reference(name, dtype):
    m, k, n = shapes.TEST[name]
    a, b = rand(m, k, dtype=dtype), rand(k, n, dtype=dtype)
    out = matmul(a, b, block_m=128, block_n=128, block_k=128)
    assert out.dtype == dtype and out.shape == (m, n)
    assert_close(out, reference.matmul(a.double(), b.double()), dtype, scale=dot_scale(k, dtype))


def test_gradcheck():
    a = rand(16, 256, dtype=torch.float64, requires_grad=True)
    b = rand(256, 128, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, y: matmul(x, y, block_k=128), (a, b))


def test_gradients_match_torch_autograd_in_bfloat16():
    a, b = (
        rand(128, 256, dtype=torch.bfloat16, requires_grad=True),
        rand(256, 128, dtype=torch.bfloat16, requires_grad=True),
    )
    g = rand(128, 128, dtype=torch.bfloat16)
    (matmul(a, b) * g).sum().backward()
    a64, b64 = (t.detach().double().requires_grad_(True) for t in (a, b))
    (a64 @ b64 * g.double()).sum().backward()
    assert_close(a.grad, a64.grad, torch.bfloat16, scale=math.sqrt(128))
    assert_close(b.grad, b64.grad, torch.bfloat16, scale=math.sqrt(128))


def test_opcheck():
    opcheck(matmul, (rand(16, 256, requires_grad=True), rand(256, 128, requires_grad=True)), {"block_k": 128})


def test_compile_fullgraph_matches_eager():
    def model(a, b):
        return matmul(a.tanh(), b).sum()

    compile_matches_eager(
        model, [rand(64, 128, requires_grad=True), rand(128, 256, requires_grad=True)], rtol=1e-4, atol=1e-4
    )


def test_lowers_for_tpu_with_aligned_blocks():
    a = jax.ShapeDtypeStruct((1024, 2048), "bfloat16")
    b = jax.ShapeDtypeStruct((2048, 512), "bfloat16")
    lowers_for_tpu(matmul, a, b)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"block_k": 100}, "block_k=100 must be a positive multiple of 128"),
        ({"block_m": 12}, "block_m=12 must be a positive multiple of 8"),
        ({"block_n": 384}, "dimension 512 is not a multiple of block_n=384"),
    ],
)
def test_misaligned_blocks_are_rejected(kwargs, message):
    with pytest.raises(Exception, match=message):
        matmul(rand(512, 512), rand(512, 512), **kwargs)


def test_shape_mismatch_is_reported():
    with pytest.raises(Exception, match=r"matmul: expected a \[M, K\] and b \[K, N\]"):
        matmul(rand(8, 128), rand(64, 128))
