"""ragged_gather and ragged_gather_reduce (the MoE dispatch and combine) against indexing, in float64."""

import pytest
import torch

from tests.helpers import rand
from tests.kernels.checks import compile_matches_eager
from tests.tokamax.base import TokamaxFamilyTests
from tests.tokamax.util import check_against_reference
from tpu_kernels.tokamax import gather, topk
from tpu_kernels.tokamax.gather import reference, shapes


class TestGather(TokamaxFamilyTests):
    family = "gather"


I32 = torch.int32


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_ragged_gather_matches_indexing(dtype):
    idx = torch.randint(0, 12, (20,))
    check_against_reference(
        "ragged_gather",
        "rows",
        lambda x, s, e: gather.ragged_gather(x, idx, s, e),
        lambda x, s, e: reference.ragged_gather(x, idx, s, e),
        [rand(12, 16, dtype=dtype), torch.tensor([0]), torch.tensor([20])],
        dtype,
        grad_scale=4,  # a row picked k times gets k gradients summed
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_ragged_gather_reduce_matches_the_weighted_sum(dtype):
    num_rows, hidden, routes, group = shapes.TEST["top3"]
    idx, valid = torch.randint(0, num_rows, (routes,)), torch.rand(routes) > 0.25
    check_against_reference(
        "ragged_gather_reduce",
        "top3",
        lambda x, w: gather.ragged_gather_reduce(x, idx, w, valid, group),
        lambda x, w: reference.ragged_gather_reduce(x, idx, w, valid, group),
        [rand(num_rows, hidden, dtype=dtype), rand(routes, dtype=dtype)],
        dtype,
        # Tokamax casts the weights to float32: float64 agrees to float32's tolerance.
        tol_dtype=torch.float32 if dtype == torch.float64 else None,
        out_scale=4,
        grad_scale=[8, 8],
    )


def test_compile_fullgraph_moe_dispatch_and_combine_with_no_graph_breaks():
    def model(x, scores):
        weights, experts = topk.router_topk(scores, 2)
        routes = gather.ragged_gather(
            x, experts.flatten(), torch.tensor([0]), torch.tensor([experts.numel()])
        )
        gate = scores.gather(1, experts.long()).softmax(-1).flatten()
        combined = gather.ragged_gather_reduce(
            routes, torch.arange(routes.shape[0]), gate, weights.flatten() > -1e9, 2
        )
        return combined.square().mean()

    compile_matches_eager(model, [rand(8, 16, requires_grad=True), rand(6, 8, requires_grad=True)])


def test_bad_arguments_say_what_to_do():
    with pytest.raises(ValueError, match=r"routes \(5\) must be a multiple of reduce_group_size \(2\)"):
        gather.ragged_gather_reduce(
            rand(4, 8), torch.zeros(5, dtype=I32), rand(5), torch.ones(5, dtype=torch.bool), 2
        )
