"""The torch shape rules used for symbolic sizes agree with the fakes derived by jax.eval_shape,
and the derived backward ops' fakes agree with what the backward computes."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from tests.helpers import rand
from tpu_kernels.tokamax import attention, glu, loss, ragged, triangle
from tpu_kernels.tokamax.wrap import _gradient_fake


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
        attention._attention_outputs,
        [_e(2, 8, 4, 16), _e(2, 6, 2, 16), _e(2, 6, 2, 24)],
        {},
    ),
    (
        attention.dot_product_attention_op,
        attention._attention_outputs,
        [_e(3, 8, 4, 16, dtype=BF16), _e(3, 8, 4, 16, dtype=BF16), _e(3, 8, 4, 16, dtype=BF16)],
        {},
    ),
    (attention.dot_product_attention_op, attention._attention_outputs, [_e(5, 2, 8, dtype=F64)] * 3, {}),
    (glu.gated_linear_unit_op, glu._glu_outputs, [_e(2, 5, 8), _e(8, 2, 12)], {}),
    (
        glu.gated_linear_unit_op,
        glu._glu_outputs,
        [_e(5, 8, dtype=BF16), _e(8, 12, dtype=BF16), _e(8, 12, dtype=BF16)],
        {},
    ),
    (ragged.ragged_dot_op, ragged._ragged_dot_outputs, [_e(10, 8), _e(3, 8, 4), _e(3, dtype=I32)], {}),
    (
        ragged.ragged_dot_op,
        ragged._ragged_dot_outputs,
        [_e(10, 8, dtype=BF16), _e(3, 8, 4, dtype=BF16), _e(3, dtype=I32)],
        {"preferred_element_type": torch.float32},
    ),
    (
        ragged.ragged_dot_general_op,
        ragged._general_outputs,
        [_e(10, 8), _e(3, 8, 4), _e(3, dtype=I32)],
        dict(lhs_contracting_dims=[1], rhs_contracting_dims=[1], lhs_ragged_dims=[0], rhs_group_dims=[0]),
    ),
    (
        ragged.ragged_dot_general_op,
        ragged._general_outputs,
        [_e(10, 8), _e(10, 5), _e(3, dtype=I32)],
        dict(lhs_contracting_dims=[0], rhs_contracting_dims=[0], lhs_ragged_dims=[0]),
    ),
    (
        ragged.ragged_dot_general_op,
        ragged._general_outputs,
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
        loss._loss_outputs,
        [_e(6, 8, dtype=BF16), _e(6, dtype=I32), _e(8, 20, dtype=BF16)],
        {},
    ),
    (
        loss.linear_softmax_cross_entropy_loss_op,
        loss._loss_outputs,
        [_e(6, 8, dtype=F64), _e(6, dtype=I32), _e(8, 20, dtype=F64)],
        {"reduction": "none"},
    ),
    (triangle.triangle_multiplication_op, triangle._triangle_outputs, [*TRI, "incoming"], {}),
]


@pytest.mark.parametrize(("op", "rule", "args", "kwargs"), CASES, ids=lambda v: getattr(v, "name", None))
def test_symbolic_shape_rule_agrees_with_the_derived_fake(op, rule, args, kwargs):
    with FakeTensorMode(allow_non_fake_inputs=True):
        want = op._derived_fake(*args, **kwargs)
        got = rule(*args, **kwargs)
    assert (tuple(got.shape), got.dtype) == (tuple(want.shape), want.dtype)


def test_the_backward_fake_gives_one_gradient_per_floating_input():
    op = attention.dot_product_attention_op
    q, k, v = rand(2, 8, 4, 16), rand(2, 8, 2, 16), rand(2, 8, 2, 8)
    mask = torch.rand(2, 1, 8, 8) > 0.5
    lengths = torch.tensor([8, 3], dtype=torch.int32)
    args = ([rand(2, 8, 4, 8)], q, k, v, None, mask, lengths, None)
    real = op.backward_op(*args, is_causal=True)
    fake = _gradient_fake(op)(*args, is_causal=True)
    assert (
        [(t.shape, t.dtype) for t in fake]
        == [(t.shape, t.dtype) for t in real]
        == [(q.shape, q.dtype), (k.shape, k.dtype), (v.shape, v.dtype)]
    )
