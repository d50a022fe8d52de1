"""kimi_delta_attention against the delta-rule recurrence written in torch, in float64."""

import pytest
import torch
import torch.nn.functional as F

from tests.helpers import compile_counted, rand
from tests.kernels.checks import opcheck
from tests.tokamax.base import TokamaxFamilyTests
from tests.tokamax.util import check_against_reference
from tpu_kernels.tokamax import kda
from tpu_kernels.tokamax.kda import reference, shapes


class TestKda(TokamaxFamilyTests):
    family = "kda"


def _inputs(h: int, b: int, t: int, k: int, v: int, dtype: torch.dtype = torch.float32) -> list:
    return [
        rand(h, b, t, k, dtype=dtype),
        rand(h, b, t, k, dtype=dtype),
        rand(h, b, t, v, dtype=dtype),
        -F.softplus(rand(h, b, t, k, dtype=dtype)),  # log-space decay
        torch.sigmoid(rand(h, b, t, dtype=dtype)),
    ]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_kimi_delta_attention_matches_the_recurrence(dtype):
    check_against_reference(
        "kimi_delta_attention",
        "l2norm",
        lambda *a: kda.kimi_delta_attention(*a, use_qk_l2norm=True),
        lambda *a: reference.kimi_delta_attention(*a, use_qk_l2norm=True),
        _inputs(*shapes.TEST["small"], dtype=dtype),
        dtype,
        out_scale=4,
        grad_scale=8,
    )


@pytest.mark.slow
def test_opcheck():
    q, k, v, g = (rand(2, 2, 6, 8, requires_grad=True) for _ in range(4))
    beta = torch.sigmoid(rand(2, 2, 6)).requires_grad_()
    opcheck(kda.kimi_delta_attention_op, (q, k, v, -F.softplus(g), beta), {"use_qk_l2norm": True})


def test_compile_fullgraph_with_no_graph_breaks():
    inputs = _inputs(2, 1, 4, 8, 8)
    compiled, counter = compile_counted(kda.kimi_delta_attention)
    for got, want in zip(compiled(*inputs), kda.kimi_delta_attention(*inputs)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert counter.frame_count == 1
