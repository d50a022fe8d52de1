"""One comparator (tpu_kernels/verification/compare.py): checked mode, the sharding simulation, the test
helpers and the benchmark's correctness column all judge with it, and agree."""

import math
import re

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tpu_kernels import autotuner, testing
from tpu_kernels.bench import correctness
from tpu_kernels.sharding import simulate as sharding_sim
from tpu_kernels.verification import checked_mode, compare
from tpu_kernels.verification.tolerance import tol


def test_the_consumers_use_the_one_module():
    assert correctness.errors is compare.errors and correctness.Errors is compare.Errors
    assert correctness.as_tensor is compare.as_tensor
    assert autotuner.point.correctness is correctness  # the autotuner judges as the benchmark does


values = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False, width=32)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(values, min_size=1, max_size=12),
    st.lists(st.floats(-1e-3, 1e-3), min_size=12, max_size=12),
    st.sampled_from([torch.float32, torch.bfloat16, torch.float16]),
    st.floats(0.5, 4.0),
)
def test_checked_mode_and_the_test_helper_give_one_verdict(want, noise, dtype, scale):
    w = torch.tensor(want, dtype=torch.float64)
    got = (w * (1 + torch.tensor(noise[: len(want)], dtype=torch.float64))).to(dtype)
    t = tol(dtype)
    verdict = compare.difference(got, w, atol=t.atol * scale, rtol=t.rtol)
    assert (checked_mode.compare(got, w, scale, dtype) is None) == (verdict is None)
    try:
        testing.assert_close(got, w, dtype, scale=scale)
        helper = None
    except AssertionError as e:
        helper = str(e)
    assert (helper is None) == (verdict is None)
    # the element rule, by hand
    g = got.to(torch.float64)
    ok = ((g - w).abs() <= t.atol * scale + t.rtol * w.abs()).all()
    assert bool(ok) == (verdict is None)


def test_the_sharding_simulation_is_the_element_rule_relative_to_the_outputs_size():
    w = torch.softmax(torch.randn(4, 64, dtype=torch.float64), -1).to(torch.bfloat16)
    assert sharding_sim.mismatch(w, w) is None
    msg = sharding_sim.mismatch(w * 2, w)
    assert re.match(r"\d+ of 256 elements differ; the first at index \(\d+, \d+\): sharded ", msg), msg
    assert "times the" in msg and "twice the bfloat16 rtol" in msg


def test_special_values_read_alike_everywhere():
    w = torch.tensor([1.0, 2.0, float("inf"), float("nan")], dtype=torch.float64)
    assert compare.difference(w.float(), w, atol=0, rtol=0) is None  # equal infinities, NaN in both
    bad = torch.tensor([1.0, float("nan"), float("inf"), float("nan")])
    assert "1 NaN and 0 inf values the reference does not have" in checked_mode.compare(bad, w)
    with pytest.raises(AssertionError, match="1 NaN and 0 inf values the reference does not have"):
        testing.assert_close(bad, w)
    assert compare.errors(bad, w).norm2 == math.inf
