"""The tokamax.ops kernels that run off-TPU, against float64 torch references."""

import pytest
import torch
import torch.nn.functional as F

from tests.helpers import compile_counted, rand
from tests.kernels.checks import compile_matches_eager, opcheck
from tests.tokamax.util import check_against_reference
from tpu_kernels.tokamax import ops_extra as X
from tpu_kernels.tokamax import reference, shapes

I32 = torch.int32


# ---- routing: selections, compared exactly -------------------------------------------------


def test_top_k_matches_torch_topk_with_row_lengths():
    rows, n, k = shapes.TOPK_TEST["rows"]
    scores, lengths = rand(rows, n), torch.tensor([n, 3, 17, 1, n, 8])
    indices, values = X.top_k(scores, k, lengths)
    want_indices, want_values = reference.top_k(scores, k, lengths)
    assert indices.dtype == I32 and values.dtype == torch.float32
    torch.testing.assert_close(indices, want_indices, rtol=0, atol=0)
    torch.testing.assert_close(values, want_values, rtol=0, atol=0)
    assert (indices[3, 1:] == -1).all() and (values[3, 1:] == float("-inf")).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_router_topk_matches_torch_topk(dtype):
    rows, n, k = shapes.TOPK_TEST["router"]
    scores = rand(rows, n, dtype=dtype)
    scores[0, [7, 2, 5]] = 10.0  # a three-way tie at the top goes to the lowest expert ids first
    weights, indices = X.router_topk(scores, k)
    want_weights, want_indices = reference.router_topk(scores, k)
    torch.testing.assert_close(weights, want_weights, rtol=0, atol=0)
    assert indices.dtype == I32 and indices[0, :3].tolist() == [2, 5, 7]
    torch.testing.assert_close(indices[1:], want_indices[1:], rtol=0, atol=0)


# ---- gather and combine ---------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_ragged_gather_matches_indexing(dtype):
    idx = torch.randint(0, 12, (20,))
    check_against_reference(
        "ragged_gather",
        "rows",
        lambda x, s, e: X.ragged_gather(x, idx, s, e),
        lambda x, s, e: reference.ragged_gather(x, idx, s, e),
        [rand(12, 16, dtype=dtype), torch.tensor([0]), torch.tensor([20])],
        dtype,
        grad_scale=4,  # a row picked k times gets k gradients summed
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_ragged_gather_reduce_matches_the_weighted_sum(dtype):
    num_rows, hidden, routes, group = shapes.GATHER_REDUCE_TEST["top3"]
    idx, valid = torch.randint(0, num_rows, (routes,)), torch.rand(routes) > 0.25
    check_against_reference(
        "ragged_gather_reduce",
        "top3",
        lambda x, w: X.ragged_gather_reduce(x, idx, w, valid, group),
        lambda x, w: reference.ragged_gather_reduce(x, idx, w, valid, group),
        [rand(num_rows, hidden, dtype=dtype), rand(routes, dtype=dtype)],
        dtype,
        # Tokamax casts the weights to float32: float64 agrees to float32's tolerance.
        tol_dtype=torch.float32 if dtype == torch.float64 else None,
        out_scale=4,
        grad_scale=[8, 8],
    )


# ---- DeepSeek-V4 RoPE ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "mode", "dtype"),
    [
        ((6, 2, 128), "rope", torch.float32),
        ((6, 256), "rope", torch.bfloat16),
        ((6, 3, 128), "qnorm_rope", torch.float32),
        ((6, 2, 128), "qnorm_rope", torch.float64),
    ],
    ids=str,
)
def test_deepseek_rope_matches_the_gptj_rotation(shape, mode, dtype):
    positions = torch.randint(0, 16, (shape[0],))
    cache = rand(16, 64)
    inverse = mode == "rope"
    check_against_reference(
        "deepseek_rope",
        f"{mode}_{len(shape)}d",
        lambda x: X.deepseek_rope(x, positions, cache, mode=mode, inverse=inverse),
        lambda x: reference.deepseek_rope(x, positions, cache.double(), mode=mode, inverse=inverse),
        [rand(*shape, dtype=dtype)],
        dtype,
        # Tokamax rotates in float32 whatever the dtype: float64 agrees to float32's tolerance.
        tol_dtype=torch.float32 if dtype == torch.float64 else None,
        out_scale=4,
        grad_scale=4,
    )


# ---- mHC (bfloat16 streams, as Tokamax requires) -------------------------------------------

MHC_CONSTANTS = dict(
    rms_eps=1e-6, hc_pre_eps=1e-6, hc_sinkhorn_eps=1e-6, hc_post_mult_value=2.0, sinkhorn_repeat=4
)


def _mhc_pre_inputs(t: int, m: int, h: int) -> list:
    return [
        rand(t, m * h, dtype=torch.bfloat16),
        rand(m * (m + 2), m * h, scale=(m * h) ** -0.5),
        torch.rand(3) + 0.5,
        rand(m * (m + 2)),
    ]


def test_mhc_post_matches_the_stream_mix():
    t, m, h = shapes.MHC_TEST["t5_m4"]
    check_against_reference(
        "mhc_post",
        "t5_m4",
        X.mhc_post,
        reference.mhc_post,
        [rand(t, h, dtype=torch.bfloat16), rand(t, m * h, dtype=torch.bfloat16), rand(t, m), rand(t, m, m)],
        torch.bfloat16,
        out_scale=4,
        grad_scale=[4, 4, 16, 16],
    )


def test_mhc_pre_matches_gates_sinkhorn_and_collapse():
    c = MHC_CONSTANTS
    check_against_reference(
        "mhc_pre",
        "t5_m4",
        lambda *a: X.mhc_pre(*a, *c.values()),
        lambda *a: reference.mhc_pre(*a, *c.values()),
        _mhc_pre_inputs(*shapes.MHC_TEST["t5_m4"]),
        torch.bfloat16,
        out_scale=[2, 1, 4],
        grad_scale=[4, 4, 40, 8],
    )


def test_mhc_fused_post_pre_is_post_then_pre():
    t, m, h = 4, 4, 32
    c = MHC_CONSTANTS
    residual, fn, scale, base = _mhc_pre_inputs(t, m, h)
    post_inputs = [rand(t, h, dtype=torch.bfloat16), residual, rand(t, m), torch.rand(t, m, m)]

    def fused_reference(x, r, plm, crm, fn, scale, base):
        new_residual = reference.mhc_post(x, r, plm, crm).bfloat16().double()  # Tokamax rounds it to bf16
        return (new_residual, *reference.mhc_pre(new_residual, fn, scale, base, *c.values()))

    check_against_reference(
        "mhc_fused_post_pre",
        "t4_m4",
        lambda *a: X.mhc_fused_post_pre(*a, *c.values()),
        fused_reference,
        [*post_inputs, fn, scale, base],
        torch.bfloat16,
        out_scale=[4, 2, 1, 4],
        grads=False,
    )


# ---- Kimi delta attention ------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_kimi_delta_attention_matches_the_recurrence(dtype):
    h, b, t, k, v = shapes.KDA_TEST["small"]
    inputs = [
        rand(h, b, t, k, dtype=dtype),
        rand(h, b, t, k, dtype=dtype),
        rand(h, b, t, v, dtype=dtype),
        -F.softplus(rand(h, b, t, k, dtype=dtype)),  # log-space decay
        torch.sigmoid(rand(h, b, t, dtype=dtype)),
    ]
    check_against_reference(
        "kimi_delta_attention",
        "l2norm",
        lambda *a: X.kimi_delta_attention(*a, use_qk_l2norm=True),
        lambda *a: reference.kimi_delta_attention(*a, use_qk_l2norm=True),
        inputs,
        dtype,
        out_scale=4,
        grad_scale=8,
    )


# ---- op checks -----------------------------------------------------------------------------


def test_opcheck_routing_and_gather():
    scores = rand(4, 32)
    opcheck(X.top_k_op, (scores, torch.tensor([32, 3, 10, 32], dtype=I32)), {"k": 5})
    opcheck(X.router_topk_op, (scores,), {"k": 3})
    x, idx = rand(10, 16, requires_grad=True), torch.tensor([3, 1, 4, 1, 5, 9], dtype=I32)
    opcheck(X.ragged_gather_op, (x, idx, torch.tensor([0], dtype=I32), torch.tensor([6], dtype=I32)))
    w, valid = rand(6, requires_grad=True), torch.tensor([1, 1, 0, 1, 1, 1], dtype=torch.bool)
    opcheck(X.ragged_gather_reduce_op, (x, idx, w, valid), {"reduce_group_size": 2})
    opcheck(
        X.deepseek_rope_op,
        (rand(6, 2, 128, requires_grad=True), torch.arange(6, dtype=I32), rand(16, 64)),
        {"mode": "qnorm_rope"},
    )


@pytest.mark.slow
def test_opcheck_mhc_and_kda():
    pre = [t.requires_grad_() for t in _mhc_pre_inputs(*shapes.MHC_TEST["t5_m4"])]
    opcheck(X.mhc_pre_op, tuple(pre), MHC_CONSTANTS)
    post = [
        rand(5, 32, dtype=torch.bfloat16, requires_grad=True),
        pre[0],
        rand(5, 4, requires_grad=True),
        rand(5, 4, 4, requires_grad=True),
    ]
    opcheck(X.mhc_post_op, tuple(post))
    opcheck(X.mhc_fused_post_pre_op, (*post, *pre[1:]), MHC_CONSTANTS)
    q, k, v, g = (rand(2, 2, 6, 8, requires_grad=True) for _ in range(4))
    beta = torch.sigmoid(rand(2, 2, 6)).requires_grad_()
    opcheck(X.kimi_delta_attention_op, (q, k, v, -F.softplus(g), beta), {"use_qk_l2norm": True})


def test_compile_fullgraph_moe_combine_and_rope_with_no_graph_breaks():
    def model(x, scores, q):
        weights, experts = X.router_topk(scores, 2)
        routes = X.ragged_gather(x, experts.flatten(), torch.tensor([0]), torch.tensor([experts.numel()]))
        gate = scores.gather(1, experts.long()).softmax(-1).flatten()
        combined = X.ragged_gather_reduce(
            routes, torch.arange(routes.shape[0]), gate, weights.flatten() > -1e9, 2
        )
        rotated = X.deepseek_rope(q, torch.arange(q.shape[0]), torch.ones(8, 64), mode="qnorm_rope")
        return combined.square().mean() + rotated.mean()

    compile_matches_eager(
        model,
        [
            rand(8, 16, requires_grad=True),
            rand(6, 8, requires_grad=True),
            rand(6, 1, 128, requires_grad=True),
        ],
    )


def test_compile_fullgraph_selections_mhc_and_kda_with_no_graph_breaks():
    def model(scores, x, residual, post, comb, q, k, v, gate, beta):
        indices, values = X.top_k(scores, 3)
        streams = X.mhc_post(x, residual, post, comb)
        out, state = X.kimi_delta_attention(q, k, v, gate, beta)
        return indices, values, streams, out, state

    h, b, t, d = 2, 1, 4, 8
    inputs = [
        rand(4, 16),
        rand(5, 32, dtype=torch.bfloat16),
        rand(5, 128, dtype=torch.bfloat16),
        rand(5, 4),
        rand(5, 4, 4),
    ]
    inputs += [rand(h, b, t, d) for _ in range(3)] + [
        -F.softplus(rand(h, b, t, d)),
        torch.sigmoid(rand(h, b, t)),
    ]
    compiled, counter = compile_counted(model)
    for got, want in zip(compiled(*inputs), model(*inputs)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert counter.frame_count == 1


def test_bad_arguments_say_what_to_do():
    with pytest.raises(ValueError, match="scores must be float32"):
        X.top_k(rand(4, 8, dtype=torch.float64), 2)
    with pytest.raises(ValueError, match=r"routes \(5\) must be a multiple of reduce_group_size \(2\)"):
        X.ragged_gather_reduce(
            rand(4, 8), torch.zeros(5, dtype=I32), rand(5), torch.ones(5, dtype=torch.bool), 2
        )
    with pytest.raises(ValueError, match="mode='rope_quant'"):
        X.deepseek_rope(rand(4, 128), torch.arange(4), rand(4, 64), mode="rope_quant")
