"""tpu_kernels.testing's TPU-lowering assertion for one given call."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
import torch

from tests.check import demo_kernels as demo
from tpu_kernels import tpu_kernel
from tpu_kernels.kernels import softmax
from tpu_kernels.testing import assert_lowers_for_tpu


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
    # block (3, 5) on (63, 125): Mosaic wants blocks divisible by 8 and 128 (tests/check/demo_kernels.py)
    with pytest.raises(AssertionError, match=r"misaligned does not lower for the TPU at f32\[63,125\]"):
        assert_lowers_for_tpu(demo.misaligned, call=((jax.ShapeDtypeStruct((63, 125), jnp.float32),), {}))
