"""top_k and router_topk against torch's sort: selections, compared exactly."""

import pytest
import torch

from tests.helpers import rand
from tests.tokamax.base import TokamaxFamilyTests
from tpu_kernels.tokamax import topk
from tpu_kernels.tokamax.topk import reference, shapes


class TestTopk(TokamaxFamilyTests):
    family = "topk"
    reference_dtypes = (torch.float32,)  # top_k takes float32 scores only (Tokamax)


I32 = torch.int32


def test_top_k_matches_torch_topk_with_row_lengths():
    rows, n, k = shapes.TEST["rows"]
    scores, lengths = rand(rows, n), torch.tensor([n, 3, 17, 1, n, 8])
    indices, values = topk.top_k(scores, k, lengths)
    want_indices, want_values = reference.top_k(scores, k, lengths)
    assert indices.dtype == I32 and values.dtype == torch.float32
    torch.testing.assert_close(indices, want_indices, rtol=0, atol=0)
    torch.testing.assert_close(values, want_values, rtol=0, atol=0)
    assert (indices[3, 1:] == -1).all() and (values[3, 1:] == float("-inf")).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_router_topk_matches_torch_topk(dtype):
    rows, n, k = shapes.TEST["router"]
    scores = rand(rows, n, dtype=dtype)
    scores[0, [7, 2, 5]] = 10.0  # a three-way tie at the top goes to the lowest expert ids first
    weights, indices = topk.router_topk(scores, k)
    want_weights, want_indices = reference.router_topk(scores, k)
    torch.testing.assert_close(weights, want_weights, rtol=0, atol=0)
    assert indices.dtype == I32 and indices[0, :3].tolist() == [2, 5, 7]
    torch.testing.assert_close(indices[1:], want_indices[1:], rtol=0, atol=0)


def test_bad_arguments_say_what_to_do():
    with pytest.raises(ValueError, match="scores must be float32"):
        topk.top_k(rand(4, 8, dtype=torch.float64), 2)
