"""tpu_kernels.testing's TPU-lowering assertion for one given call, and its opcheck on float8 inputs."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
import torch

from tests.lowering_check import demo_kernels as demo
from tpu_kernels import tpu_kernel
from tpu_kernels.kernels import softmax
from tpu_kernels.testing import OPCHECK_TESTS, assert_lowers_for_tpu, opcheck


@tpu_kernel("testing_helpers::plain_double")
def _plain_double(x: torch.Tensor) -> torch.Tensor:
    return x * 2  # plain JAX: lowers for the TPU without any Mosaic kernel


def test_one_call_lowers_with_mosaic():
    spec = jax.ShapeDtypeStruct((1024, 512), "bfloat16")
    assert_lowers_for_tpu(softmax, call=((spec,), {}))
    assert_lowers_for_tpu(softmax, call=((spec,), {}), chip_name=None)  # the caller's target, no VMEM


def test_a_call_without_mosaic_or_one_that_fails_to_lower_is_reported():
    spec = jax.ShapeDtypeStruct((64, 128), jnp.float32)
    with pytest.raises(AssertionError, match=r"plain_double: the TPU lowering at .* contains no Mosaic"):
        assert_lowers_for_tpu(_plain_double, call=((spec,), {}))
    with pytest.raises(AssertionError, match=r"plain_double: the TPU lowering contains no Mosaic"):
        assert_lowers_for_tpu(_plain_double, call=((spec,), {}), chip_name=None)
    # block (3, 5) on (63, 125): Mosaic wants blocks divisible by 8 and 128 (tests/lowering_check/demo_kernels.py)
    with pytest.raises(AssertionError, match=r"misaligned does not lower for the TPU at f32\[63,125\]"):
        assert_lowers_for_tpu(demo.misaligned, call=((jax.ShapeDtypeStruct((63, 125), jnp.float32),), {}))


@tpu_kernel("testing_helpers::dequantize")
def _dequantize(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return x.astype(jnp.float32) * scale


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_opcheck_with_float8_inputs_skips_only_the_schema_test_and_says_why(dtype):
    """torch's test_schema has no float8 arithmetic for the inputs it compares; opcheck says so
    (a warning, and the result) and runs the other three tests, which still catch a bad op."""
    x, scale = torch.randn(4, 8).to(dtype), torch.randn(4, 8)
    with pytest.warns(UserWarning, match=r"dequantize: opcheck skipped test_schema: .*float8.* inputs"):
        results = opcheck(_dequantize, (x, scale))
    assert results["test_schema"].startswith("SKIPPED: torch's schema check cannot run on float8")
    others = {k: v for k, v in results.items() if k != "test_schema"}
    assert others == dict.fromkeys(OPCHECK_TESTS[1:], "SUCCESS")
    with pytest.raises(Exception, match="test_schema failed"):  # what the skip spares the caller
        torch.library.opcheck(_dequantize.overload, (x, scale), test_utils="test_schema")

    @tpu_kernel(f"testing_helpers::wrong_fake_{str(dtype).removeprefix('torch.')}")
    def wrong_fake(x: torch.Tensor) -> torch.Tensor:
        return x.astype(jnp.float32)

    wrong_fake.register_fake(lambda x: x.new_empty(x.shape[0]))  # the wrong shape: still caught
    with pytest.raises(Exception, match="test_faketensor"), pytest.warns(UserWarning, match="skipped"):
        opcheck(wrong_fake, (x,))


def test_opcheck_without_float8_runs_every_test():
    results = opcheck(_dequantize, (torch.randn(4, 8), torch.randn(4, 8)))
    assert results == dict.fromkeys(OPCHECK_TESTS, "SUCCESS")
