"""kimi_delta_attention against the delta-rule recurrence written in torch, in float64."""

import pytest
import torch
import torch.nn.functional as F

from tests.helpers import rand
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
