"""softmax: a row-wise Pallas kernel with an explicit backward kernel."""

import jax
import pytest
import torch

from tests.helpers import assert_close, rand
from tests.kernels.base import KernelFamilyTests
from tests.kernels.checks import grid_semantics, lowers_for_tpu, opcheck
from tpu_kernels import testing
from tpu_kernels.kernels import softmax
from tpu_kernels.kernels.softmax import pallas, reference
from tpu_kernels.lowering_check.vmem import kernel_footprints


class TestSoftmax(KernelFamilyTests):
    family = "softmax"
    kernel_kwargs = {"block_rows": 64}  # the 300-row TEST shape spans 5 blocks, the last partial
    small_shape = "small"
    gradcheck_shape = (24, 128)
    zero_size_shapes = [(0, 8), (3, 0), (0, 0), (2, 0)]
    helion_shapes = ["small"]
    compile_shapes = [(8, 128), (300, 130), (5, 37)]

    def out_scale(self, shape, dtype):
        # the probabilities are about 1/cols, far below the table's unit-sized atol
        return 1 / shape[-1]

    def grad_scales(self, shape, dtype):
        # dx = y * (g - sum(g * y)) rounds the O(1) cancellation g - sum(g * y) and scales it
        # by y, whose largest values (logits of scale 3) are not small: the unit scale
        return [1.0]


def test_explicit_backward_kernel_is_its_own_op():
    assert softmax.backward_op.name == "tpu_kernels::softmax_backward"
    assert softmax.backward_op.fn is pallas.softmax_backward


def test_opcheck_of_the_backward_kernel():
    opcheck(softmax.backward_op, (rand(8, 128), rand(8, 128)))


def test_backward_kernel_lowers_for_tpu():
    spec = jax.ShapeDtypeStruct((1024, 512), "bfloat16")
    lowers_for_tpu(softmax.backward_op, spec, spec)


def test_a_zero_size_batch_dimension_keeps_its_shape():
    assert softmax(torch.randn(2, 0, 16)).shape == (2, 0, 16)


# ---- numerics that bite (#16): range, one rounding, block sizes -------------------------


@pytest.mark.parametrize("offset", [0.0, 1000.0])
def test_large_logits(offset):
    """Logits far above float32 exp's overflow (about 88.7): the max is subtracted first."""
    x = rand(64, 256, scale=100) + offset
    out = softmax(x)
    assert torch.isfinite(out).all()
    assert_close(out, reference.softmax(x.double()), torch.float32, scale=1 / 256)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_low_precision_is_float32_inside_with_one_rounding(dtype):
    """The kernel promises float32 arithmetic and one rounding: within 1 ulp of the exact
    result everywhere, and relative error under 1 ulp on the probabilities that matter
    (above 1/cols), where the tolerance table's atol (8e-3 for bf16) would hide everything."""
    x = rand(300, 256, dtype=dtype, scale=3)
    out = softmax(x, block_rows=64)
    exact = reference.softmax(x.double())
    testing.assert_ulps(out, exact, ulps=1, what="softmax")
    big = exact > 1 / 256
    rel = ((out.double() - exact).abs() / exact)[big]
    assert big.sum() > 1000 and rel.max() <= torch.finfo(dtype).eps, rel.max()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_low_precision_backward_is_float32_inside(dtype):
    y = softmax(rand(200, 256, dtype=torch.float64, scale=2)).to(dtype)
    dy = rand(200, 256, dtype=dtype)
    dx = softmax.backward_op(y, dy)
    y64, dy64 = y.double(), dy.double()
    exact = y64 * (dy64 - (dy64 * y64).sum(-1, keepdim=True))
    assert dx.dtype == dtype
    # atol: float32's own rounding of the cancellation dy - sum(dy * y), at most ~1e-7 * |dy|
    testing.assert_ulps(dx, exact, ulps=1, atol=1e-6, what="softmax_backward")


@pytest.mark.parametrize("block_rows", [1, 12, 100, 299, 300, 301, 1024])
def test_block_rows_not_multiples_of_8_and_at_the_boundaries(block_rows):
    """block_rows is rounded down to a multiple of 8 (1 -> 8), or all rows when it covers them."""
    x = rand(300, 128, scale=3)
    assert_close(softmax(x, block_rows=block_rows), reference.softmax(x.double()), torch.float32)
    y, dy = softmax(x), rand(300, 128)
    expected = y.double() * (dy.double() - (dy.double() * y.double()).sum(-1, keepdim=True))
    assert_close(softmax.backward_op(y, dy, block_rows=block_rows), expected, torch.float32)


@pytest.mark.parametrize("rows, block_rows", [(300, 100), (50, 100), (96, 12)])
def test_odd_block_rows_lower_for_tpu(rows, block_rows):
    spec = jax.ShapeDtypeStruct((rows, 256), "bfloat16")
    lowers_for_tpu(softmax, spec, block_rows=block_rows)
    lowers_for_tpu(softmax.backward_op, spec, spec, block_rows=block_rows)


def test_grid_is_declared_parallel():
    """Each row block is independent: both kernels mark their grid "parallel" (two-core chips)."""
    spec = jax.ShapeDtypeStruct((512, 256), "bfloat16")
    assert grid_semantics(pallas.softmax, spec) == [("parallel",)]
    assert grid_semantics(pallas.softmax_backward, spec, spec) == [("parallel",)]


def test_default_block_fits_the_smallest_scoped_vmem_limit():
    """bf16[4096, 4096] at the default blocks (32 MiB of x over at least 64 grid steps: 512 KiB,
    64 rows, forward and backward; `_blocks.block_bytes`): the buffers the check counts stay well
    under v5e's 16 MiB default scoped limit, and so does the kernel's own estimate with its
    body's temporaries (`pallas.FORWARD`, `pallas.BACKWARD`), so no limit is raised; 256-row
    blocks did not compile for the backward on a v5e under the default limit
    (bench/reports/chip_v5e.json, "tune")."""
    spec = jax.ShapeDtypeStruct((4096, 4096), "bfloat16")
    fwd = kernel_footprints(pallas.softmax, spec)[0].bytes
    bwd = kernel_footprints(pallas.softmax_backward, spec, spec)[0].bytes
    assert (fwd, bwd) == (2 * 2**20, 3 * 2**20)  # 64 rows each
    assert pallas.FORWARD.need(64, 4096, 2) <= 12 * 2**20 and pallas.BACKWARD.need(64, 4096, 2) <= 12 * 2**20
