"""dot_product_attention against F.scaled_dot_product_attention and a float64 reference."""

import pytest
import torch
import torch.nn.functional as F

from tests.helpers import assert_close, compile_counted, rand
from tests.kernels.checks import compile_matches_eager, opcheck
from tests.tokamax.base import TokamaxFamilyTests
from tests.tokamax.util import check_against_reference
from tpu_kernels import tokamax as tk
from tpu_kernels.tokamax import attention
from tpu_kernels.tokamax.attention import reference, shapes


class TestAttention(TokamaxFamilyTests):
    family = "attention"


DTYPES = [torch.float32, torch.float64, torch.bfloat16]

# Each named shape also exercises a set of features, so every feature is checked in
# every dtype without multiplying the cases.
FEATURES = {
    "mha": dict(is_causal=True, bias="full"),
    "gqa": dict(mask="batch", logits_soft_cap=2.0, local_window_size=(3, 1)),
    "mqa_cross": dict(is_causal=True, kv_lengths=True, scale=0.3),
    "value_dim": dict(q_lengths=True, kv_lengths=True, bias="heads"),
}


def _inputs(shape: dict, dtype: torch.dtype, features: dict) -> tuple[list, dict]:
    b, t, s = shape["batch"], shape["seq_q"], shape["seq_kv"]
    n, k, h, hv = shape["heads"], shape["kv_heads"], shape["head_dim"], shape["head_dim_v"]
    q, key, v = rand(b, t, n, h, dtype=dtype), rand(b, s, k, h, dtype=dtype), rand(b, s, k, hv, dtype=dtype)
    bias = {"full": lambda: rand(b, n, t, s, dtype=dtype), "heads": lambda: rand(n, t, s, dtype=dtype)}.get(
        features.get("bias"), lambda: None
    )()
    mask = torch.rand(b, 1, t, s) > 0.3 if features.get("mask") else None
    kw = {
        name: features[name]
        for name in ("is_causal", "logits_soft_cap", "local_window_size", "scale")
        if name in features
    }
    if features.get("q_lengths"):
        kw["query_seq_lengths"] = torch.randint(1, t + 1, (b,))
    if features.get("kv_lengths"):
        kw["key_value_seq_lengths"] = torch.randint(1, s + 1, (b,))
    return [q, key, v, bias, mask], kw


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(shapes.TEST))
def test_matches_float64_reference_forward_and_gradients(name, dtype):
    inputs, kw = _inputs(shapes.TEST[name], dtype, FEATURES[name])
    # bf16: the probabilities are rounded to bf16 before the value matmul. Measured over 10
    # seeds: outputs within 7.8e-3, gradients within 3.5e-2 (values of magnitude ~2-4).
    low = dtype == torch.bfloat16
    check_against_reference(
        "dot_product_attention",
        name,
        lambda q, k, v, b, m: tk.dot_product_attention(q, k, v, b, m, **kw),
        lambda q, k, v, b, m: reference.dot_product_attention(q, k, v, b, m, **kw),
        inputs,
        dtype,
        out_scale=4 if low else 2,
        grad_scale=16 if low else 8,
    )


def test_reference_is_torch_sdpa_where_the_semantics_agree():
    q, k, v = (
        rand(2, 10, 6, 16, dtype=torch.float64),
        rand(2, 10, 2, 16, dtype=torch.float64),
        rand(2, 10, 2, 8, dtype=torch.float64),
    )
    bias = rand(2, 6, 10, 10, dtype=torch.float64)
    ours = reference.dot_product_attention(q, k, v, bias, is_causal=True)
    causal = torch.ones(10, 10, dtype=torch.bool).tril()
    sdpa = F.scaled_dot_product_attention(
        *(t.transpose(1, 2) for t in (q, k, v)),
        attn_mask=bias.masked_fill(~causal, float("-inf")),
        enable_gqa=True,
    ).transpose(1, 2)
    assert_close(ours, sdpa, torch.float64)


def test_torch_layout_and_the_sdpa_helper_match_torch_sdpa():
    dtype = torch.float64  # the layouts and masks, not precision (the reference tests cover dtypes)
    q, k, v = (
        rand(2, 8, 12, 16, dtype=dtype),
        rand(2, 2, 12, 16, dtype=dtype),
        rand(2, 2, 12, 16, dtype=dtype),
    )
    mask = torch.rand(2, 1, 12, 12) > 0.3
    mask[..., 0] = True  # every query sees a key: torch gives NaN or 0 for empty rows, Tokamax the mean
    bias = rand(2, 8, 12, 12, dtype=dtype)
    for ours, theirs in [
        (
            tk.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
            F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
        ),
        (
            tk.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True, scale=0.2),
            F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True, scale=0.2),
        ),
        (
            tk.scaled_dot_product_attention(q, k, v, attn_mask=bias, enable_gqa=True),
            F.scaled_dot_product_attention(q, k, v, attn_mask=bias, enable_gqa=True),
        ),
        (
            tk.dot_product_attention(q, k, v, bias, mask, layout="BNTH"),
            F.scaled_dot_product_attention(
                q, k, v, attn_mask=bias.masked_fill(~mask, float("-inf")), enable_gqa=True
            ),
        ),
    ]:
        assert ours.shape == theirs.shape == (2, 8, 12, 16)
        assert_close(ours, theirs.double(), dtype, scale=2)


def test_fully_masked_query_rows_are_the_mean_of_value_and_get_no_gradient():
    q = rand(1, 6, 2, 8, dtype=torch.float64, requires_grad=True)
    k, v = rand(1, 6, 2, 8, dtype=torch.float64), rand(1, 6, 2, 8, dtype=torch.float64)
    out = tk.dot_product_attention(q, k, v, query_seq_lengths=torch.tensor([4]))
    torch.testing.assert_close(out[:, 4:], v.mean(dim=1, keepdim=True).expand(1, 2, 2, 8))
    out.sum().backward()
    assert q.grad[:, 4:].abs().max() == 0 and q.grad[:, :4].abs().max() > 0


def test_xla_chunked_matches_xla():
    q, k, v = rand(2, 40, 4, 16), rand(2, 40, 4, 16), rand(2, 40, 4, 16)
    chunked = tk.dot_product_attention(q, k, v, is_causal=True, implementation="xla_chunked")
    assert_close(chunked, tk.dot_product_attention(q, k, v, is_causal=True).double(), torch.float32, scale=2)


def test_opcheck_with_mask_lengths_window_and_soft_cap():
    # what the small calls (TestAttention) lack: the optional mask and lengths, the statics
    q, k, v = (
        rand(2, 8, 4, 16, requires_grad=True),
        rand(2, 8, 2, 16, requires_grad=True),
        rand(2, 8, 2, 16, requires_grad=True),
    )
    bias, mask = rand(2, 1, 8, 8, requires_grad=True), torch.rand(2, 4, 8, 8) > 0.2
    lengths = torch.tensor([8, 5], dtype=torch.int32)
    kwargs = dict(is_causal=True, local_window_size=[2, 1], logits_soft_cap=3.0, implementation="xla")
    opcheck(attention.dot_product_attention_op, (q, k, v, bias, mask, lengths, lengths), kwargs)


def test_compile_fullgraph_matches_eager_with_no_graph_breaks():
    def model(q, k, v, b):
        out = tk.dot_product_attention(q * 2, k, v, b, is_causal=True, local_window_size=4)
        return (
            tk.scaled_dot_product_attention(
                out.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), enable_gqa=True
            )
            .square()
            .mean()
        )

    inputs = [
        rand(2, 8, 4, 16, requires_grad=True),
        rand(2, 8, 2, 16, requires_grad=True),
        rand(2, 8, 2, 16, requires_grad=True),
        rand(2, 4, 8, 8, requires_grad=True),
    ]
    compile_matches_eager(model, inputs)


def test_compile_with_dynamic_shapes_gives_one_graph_for_all_sizes():
    fn, counter = compile_counted(
        lambda q, k, v: tk.dot_product_attention(q, k, v, is_causal=True).sum(), dynamic=True
    )
    for s in (8, 12, 20):
        q, k, v = rand(2, s, 4, 16), rand(2, s, 2, 16), rand(2, s, 2, 16)
        assert_close(
            fn(q, k, v),
            reference.dot_product_attention(q.double(), k.double(), v.double(), is_causal=True).sum(),
            torch.float32,
            scale=20,
        )
    assert counter.frame_count == 1


def test_bad_arguments_say_what_to_do():
    q, k = rand(1, 4, 6, 8), rand(1, 4, 4, 8)
    with pytest.raises(ValueError, match="must divide the query's"):
        tk.dot_product_attention(q, k, k)
    with pytest.raises(ValueError, match="layout='BSHD'; use 'BTNH' or 'BNTH'"):
        tk.dot_product_attention(q, q, q, layout="BSHD")
    with pytest.raises(NotImplementedError, match="dropout_p=0.1.*no dropout"):
        tk.scaled_dot_product_attention(q, q, q, dropout_p=0.1)
    with pytest.raises(ValueError, match="enable_gqa=True"):
        tk.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), k.transpose(1, 2))
    with pytest.raises(NotImplementedError, match="float16.*use bfloat16 or float32 on cpu"):
        tk.dot_product_attention(*(t.half() for t in (q, q, q)))
    with pytest.raises(ValueError, match="exactly one batch dimension"):
        tk.dot_product_attention(q[0], q[0], q[0], query_seq_lengths=torch.tensor([2]))
