"""The torch shape rules used for symbolic sizes agree with the fakes derived by jax.eval_shape,
and the derived backward ops' fakes agree with what the backward computes."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from tests.helpers import rand
from tpu_kernels.definition import dtypes
from tpu_kernels.tokamax import FAMILIES, attention, gather, glu, kda, loss, mhc, ragged, rope, topk, triangle
from tpu_kernels.tokamax.registry import all_ops


def _e(*shape, dtype=torch.float32):
    return torch.empty(*shape, dtype=dtype)


I32, BOOL, BF16, F64 = torch.int32, torch.bool, torch.bfloat16, torch.float64
TRI = [
    _e(5, 5, 6),
    _e(5, 5, dtype=BOOL),
    _e(6, 2, 4),
    _e(6, 2, 4),
    _e(4, 7),
    _e(6, 7),
    _e(6),
    _e(6),
    _e(4),
    _e(4),
]

CASES = [
    (
        attention.dot_product_attention_op,
        [_e(2, 8, 4, 16), _e(2, 6, 2, 16), _e(2, 6, 2, 24)],
        {},
    ),
    (
        attention.dot_product_attention_op,
        [_e(3, 8, 4, 16, dtype=BF16), _e(3, 8, 4, 16, dtype=BF16), _e(3, 8, 4, 16, dtype=BF16)],
        {},
    ),
    (attention.dot_product_attention_op, [_e(5, 2, 8, dtype=F64)] * 3, {}),
    (glu.gated_linear_unit_op, [_e(2, 5, 8), _e(8, 2, 12)], {}),
    (
        glu.gated_linear_unit_op,
        [_e(5, 8, dtype=BF16), _e(8, 12, dtype=BF16), _e(8, 12, dtype=BF16)],
        {},
    ),
    (ragged.ragged_dot_op, [_e(10, 8), _e(3, 8, 4), _e(3, dtype=I32)], {}),
    (
        ragged.ragged_dot_op,
        [_e(10, 8, dtype=BF16), _e(3, 8, 4, dtype=BF16), _e(3, dtype=I32)],
        {"preferred_element_type": torch.float32},
    ),
    (
        ragged.ragged_dot_general_op,
        [_e(10, 8), _e(3, 8, 4), _e(3, dtype=I32)],
        dict(lhs_contracting_dims=[1], rhs_contracting_dims=[1], lhs_ragged_dims=[0], rhs_group_dims=[0]),
    ),
    (
        ragged.ragged_dot_general_op,
        [_e(10, 8), _e(10, 5), _e(3, dtype=I32)],
        dict(lhs_contracting_dims=[0], rhs_contracting_dims=[0], lhs_ragged_dims=[0]),
    ),
    (
        ragged.ragged_dot_general_op,
        [_e(4, 10, 8), _e(4, 8, 5), _e(4, dtype=I32)],
        dict(
            lhs_contracting_dims=[2],
            rhs_contracting_dims=[1],
            lhs_batch_dims=[0],
            rhs_batch_dims=[0],
            lhs_ragged_dims=[0],
        ),
    ),
    (
        loss.linear_softmax_cross_entropy_loss_op,
        [_e(6, 8, dtype=BF16), _e(6, dtype=I32), _e(8, 20, dtype=BF16)],
        {},
    ),
    (
        loss.linear_softmax_cross_entropy_loss_op,
        [_e(6, 8, dtype=F64), _e(6, dtype=I32), _e(8, 20, dtype=F64)],
        {"reduction": "none"},
    ),
    (triangle.triangle_multiplication_op, [*TRI, "incoming"], {}),
]


@pytest.mark.parametrize(("op", "args", "kwargs"), CASES, ids=lambda v: getattr(v, "name", None))
def test_symbolic_shape_rule_agrees_with_the_derived_fake(op, args, kwargs):
    with FakeTensorMode(allow_non_fake_inputs=True):
        want = op._derived_fake(*args, **kwargs)
        got = op.symbolic_fake(*args, **kwargs)
    assert (tuple(got.shape), got.dtype) == (tuple(want.shape), want.dtype)


def test_the_backward_fake_gives_one_gradient_per_floating_input():
    op = attention.dot_product_attention_op
    q, k, v = rand(2, 8, 4, 16), rand(2, 8, 2, 16), rand(2, 8, 2, 8)
    mask = torch.rand(2, 1, 8, 8) > 0.5
    lengths = torch.tensor([8, 3], dtype=torch.int32)
    args = (rand(2, 8, 4, 8), q, k, v, None, mask, lengths, None)
    real = op.backward_op(*args, is_causal=True)
    with FakeTensorMode(allow_non_fake_inputs=True):  # the backward op's registered fake
        fake = op.backward_op.overload(*args, is_causal=True)
    # one result per tensor input; those without a gradient get an empty float32 placeholder
    empty = (torch.Size([0]), torch.float32)
    assert (
        [(t.shape, t.dtype) for t in fake]
        == [(t.shape, t.dtype) for t in real]
        == [(q.shape, q.dtype), (k.shape, k.dtype), (v.shape, v.dtype), empty, empty, empty, empty]
    )


def _mhc(t=5, m=4, h=32):
    bf = torch.bfloat16
    return dict(
        x=_e(t, h, dtype=bf),
        residual=_e(t, m * h, dtype=bf),
        post=_e(t, m),
        comb=_e(t, m, m),
        fn=_e(m * (m + 2), m * h),
        scale=_e(3),
        base=_e(m * (m + 2)),
    )


MHC = _mhc()
MHC_KW = dict(rms_eps=1e-6, hc_pre_eps=1e-6, hc_sinkhorn_eps=1e-6, hc_post_mult_value=2.0, sinkhorn_repeat=2)
KDA = [_e(2, 3, 6, 8), _e(2, 3, 6, 8), _e(2, 3, 6, 4), _e(2, 3, 6, 8), _e(2, 3, 6)]
EXTRA_CASES = [
    (topk.top_k_op, [_e(4, 32), _e(4, dtype=I32)], {"k": 5}),
    (topk.router_topk_op, [_e(6, 16, dtype=BF16)], {"k": 3}),
    (
        gather.ragged_gather_reduce_op,
        [_e(10, 8), _e(12, dtype=I32), _e(12), _e(12, dtype=BOOL)],
        {"reduce_group_size": 3},
    ),
    (rope.deepseek_rope_op, [_e(6, 2, 128, dtype=BF16), _e(6, dtype=I32), _e(16, 64)], {}),
    (mhc.mhc_pre_op, [MHC["residual"], MHC["fn"], MHC["scale"], MHC["base"]], MHC_KW),
    (mhc.mhc_post_op, [MHC["x"], MHC["residual"], MHC["post"], MHC["comb"]], {}),
    (
        mhc.mhc_fused_post_pre_op,
        [MHC["x"], MHC["residual"], MHC["post"], MHC["comb"], MHC["fn"], MHC["scale"], MHC["base"]],
        MHC_KW,
    ),
    (kda.kimi_delta_attention_op, KDA, {}),
    (
        kda.kimi_delta_attention_op,
        [*[t.double() for t in KDA], None, None, _e(3, 2, 2, 8, 4, dtype=F64)],
        {},
    ),
]


@pytest.mark.parametrize(("op", "args", "kwargs"), EXTRA_CASES, ids=lambda v: getattr(v, "name", None))
def test_extra_ops_symbolic_shape_rules_agree_with_the_derived_fakes(op, args, kwargs):
    with FakeTensorMode(allow_non_fake_inputs=True):
        want = op._derived_fake(*args, **kwargs)
        got = op.symbolic_fake(*args, **kwargs)
    assert [(tuple(t.shape), t.dtype) for t in got] == [(tuple(t.shape), t.dtype) for t in want]


def _fake_tensor(spec):
    """A ShapeDtypeStruct of an op's TPU examples as a tensor (fake inside FakeTensorMode)."""
    if not hasattr(spec, "shape") or not hasattr(spec, "dtype"):
        return spec
    return torch.empty(spec.shape, dtype=dtypes.to_torch("test", spec.dtype))


def _listed(outputs):
    return [outputs] if isinstance(outputs, torch.Tensor) else list(outputs)


@pytest.mark.parametrize(
    "op", [op for op in all_ops() if op.symbolic_fake is not None], ids=lambda op: op.short_name
)
def test_every_shape_rule_agrees_with_the_derived_fake_at_the_ops_tpu_examples(op):
    # Every op of every family that has a shape rule, at the TPU-sized calls of its
    # examples (XLA: the derived fake traces the body on this CPU machine).
    for args, kwargs in op.examples():
        kwargs = dict(kwargs, implementation="xla")
        with FakeTensorMode(allow_non_fake_inputs=True):
            tensors = [[_fake_tensor(t) for t in a] if isinstance(a, list) else _fake_tensor(a) for a in args]
            want = _listed(op._derived_fake(*tensors, **kwargs))
            got = _listed(op.symbolic_fake(*tensors, **kwargs))
        assert [(tuple(t.shape), t.dtype) for t in got] == [(tuple(t.shape), t.dtype) for t in want]


def test_every_family_op_has_tpu_examples_and_a_fake_for_symbolic_sizes_or_needs_none():
    # A new op without examples would drop out of `tpu-kernels check` unnoticed.
    assert FAMILIES and all(op.examples is not None for op in all_ops())
    # These trace with symbolic sizes (Tokamax's checks pass), so the derived fake serves.
    traced = {"layer_norm", "ragged_gather"}
    assert {op.short_name for op in all_ops() if op.symbolic_fake is None} == traced
