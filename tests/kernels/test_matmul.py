"""matmul: a tiled Pallas kernel (float32 VMEM accumulator) with a reference-derived backward."""

import math

import jax
import pytest
import torch

from tests.helpers import FLOAT_DTYPES, assert_close, rand
from tests.kernels.checks import compile_matches_eager, grid_semantics, lowers_for_tpu, opcheck
from tpu_kernels import testing
from tpu_kernels.errors import InvalidArgumentError
from tpu_kernels.kernels import matmul
from tpu_kernels.kernels.matmul import pallas, reference, shapes
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
    with pytest.raises(InvalidArgumentError, match=message):
        matmul(rand(512, 512), rand(512, 512), **kwargs)


def test_shape_mismatch_is_reported():
    with pytest.raises(InvalidArgumentError, match=r"matmul: expected a \[M, K\] and b \[K, N\]"):
        matmul(rand(8, 128), rand(64, 128))


# ---- numerics that bite (#16): float32 accumulation across k tiles ---------------------


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_low_precision_accumulates_in_float32_across_k_tiles(dtype):
    """b's rows come in pairs v, -v at positions that straddle the k tiles, so each k tile's
    partial product is large (~10) while the exact result is 0. With a float32 accumulator
    (and float32 dot results) the sum stays at float32 rounding (~1e-5); a partial rounded to
    bf16/f16 on the way (a dot without preferred_element_type, a low-precision accumulator)
    leaves errors of 1e-2 to 1e-1."""
    k = 384  # three k tiles of 128
    a_half = rand(128, k // 2, dtype=dtype)
    v = rand(k // 2, 128, dtype=dtype)
    perm = torch.randperm(k)
    a = torch.cat([a_half, a_half], dim=1)[:, perm]
    b = torch.cat([v, -v])[perm]
    out = matmul(a, b, block_m=128, block_n=128, block_k=128)
    assert out.dtype == dtype and (a.double() @ b.double()).abs().max() < 1e-9
    assert out.double().abs().max() < 1e-3, out.double().abs().max()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_low_precision_is_float32_inside_with_one_rounding(dtype):
    a, b = rand(128, 512, dtype=dtype), rand(512, 256, dtype=dtype)
    out = matmul(a, b, block_m=128, block_n=128, block_k=128)
    # atol: float32's accumulation error over 512 terms of size ~1, ~1e-5 * sqrt(512)
    testing.assert_ulps(out, a.double() @ b.double(), ulps=1, atol=1e-4, what="matmul")


def test_grid_semantics_parallel_i_j_and_sequential_k():
    a = jax.ShapeDtypeStruct((512, 512), "bfloat16")
    assert grid_semantics(pallas.matmul, a, a) == [("parallel", "parallel", "arbitrary")]
