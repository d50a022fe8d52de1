"""Every Tokamax op under torch.compile's default dynamic shapes (automatic dynamic after a
second size), forward and backward, at three sizes, two graphs (one per compile); and
dynamic=True and mark_dynamic on a few. The ops come from the registry (tokamax.FAMILIES):
an op without a case here fails test_every_registered_op_has_a_case."""

from collections.abc import Callable

import pytest
import torch

from tests.helpers import rand
from tests.tokamax import test_kda, test_mhc, test_triangle
from tpu_kernels import tokamax as tk
from tpu_kernels.testing import MARK_DYNAMIC, compile_dynamic_matches_eager
from tpu_kernels.tokamax.registry import all_ops

I32 = torch.int32
# the varying size (tokens, rows, sequence): no other dim of a case equals one of these
T = (6, 10, 14)
MHC = dict(rms_eps=1e-6, hc_pre_eps=1e-6, hc_sinkhorn_eps=1e-6, hc_post_mult_value=2.0, sinkhorn_repeat=2)


def _g(*shape, dtype=torch.float32, scale=1.0):
    return rand(*shape, dtype=dtype, scale=scale, requires_grad=True)


def _attention(t):
    return [_g(2, t, 4, 16), _g(2, t, 2, 16), _g(2, t, 2, 8)]


def _grad(inputs):
    """The floating inputs requiring grad (the families' own test inputs do not)."""
    return [t.requires_grad_() if t.is_floating_point() else t for t in inputs]


def _kda(t):
    return _grad(test_kda._inputs(2, 1, t, 8, 4))


def _mhc_post(t):
    return _grad(test_mhc._mhc_post_inputs(t, 4, 32))


def _mhc_pre(t):
    return _grad(test_mhc._mhc_pre_inputs(t, 4, 32))


def _triangle(t):
    return _grad(test_triangle._inputs(t, 8, 4, 5, torch.float32))


def _groups(t):
    """Group sizes of t rows in three groups (one may be empty)."""
    return torch.tensor([t // 2, 0, t - t // 2], dtype=I32)


# op name -> (model, inputs at size t). A model returns the op's outputs (a float one first).
CASES: dict[str, tuple[Callable, Callable[[int], list]]] = {
    "dot_product_attention": (
        lambda q, k, v: tk.dot_product_attention(q, k, v, is_causal=True),
        _attention,
    ),
    "ragged_gather": (
        lambda x, idx: tk.ragged_gather(
            x, idx, torch.tensor([0], dtype=I32), torch.tensor([idx.shape[0]], dtype=I32)
        ),
        lambda t: [_g(t, 16), torch.randint(0, t, (t + 3,), dtype=I32)],
    ),
    "ragged_gather_reduce": (
        lambda x, idx, w, valid: tk.ragged_gather_reduce(x, idx, w, valid, 2),
        lambda t: [_g(t, 16), torch.randint(0, t, (2 * t,), dtype=I32), _g(2 * t), torch.rand(2 * t) > 0.2],
    ),
    "gated_linear_unit": (
        lambda x, w: tk.gated_linear_unit(x, w, activation="silu"),
        lambda t: [_g(t, 16), _g(16, 2, 24)],
    ),
    "kimi_delta_attention": (lambda *a: tk.kimi_delta_attention(*a), _kda),
    "linear_softmax_cross_entropy_loss": (
        lambda x, labels, w: tk.linear_softmax_cross_entropy_loss(x, labels, w, reduction="mean"),
        lambda t: [_g(t, 16), torch.randint(0, 40, (t,), dtype=I32), _g(16, 40)],
    ),
    "mhc_pre": (lambda *a: tk.mhc_pre(*a, **MHC), _mhc_pre),
    "mhc_post": (tk.mhc_post, _mhc_post),
    "mhc_fused_post_pre": (
        lambda x, r, post, comb, fn, scale, base: tk.mhc_fused_post_pre(
            x, r, post, comb, fn, scale, base, **MHC
        ),
        lambda t: [*_mhc_post(t), *_mhc_pre(t)[1:]],
    ),
    "layer_norm": (lambda x, w, b: tk.layer_norm(x, w, b, eps=1e-5), lambda t: [_g(t, 32), _g(32), _g(32)]),
    "ragged_dot": (
        lambda a, b: tk.ragged_dot(a, b, _groups(a.shape[0])),
        lambda t: [_g(t, 16), _g(3, 16, 8)],
    ),
    "ragged_dot_general": (
        lambda a, b: tk.ragged_dot_general(
            a,
            b,
            _groups(a.shape[0]),
            lhs_contracting_dims=[1],
            rhs_contracting_dims=[1],
            lhs_ragged_dims=[0],
            rhs_group_dims=[0],
        ),
        lambda t: [_g(t, 16), _g(3, 16, 8)],
    ),
    "deepseek_rope": (
        lambda x, pos, cache: tk.deepseek_rope(x, pos, cache, mode="qnorm_rope"),
        lambda t: [_g(t, 2, 128), torch.arange(t, dtype=I32), rand(16, 64)],
    ),
    "top_k": (lambda s: tk.top_k(s, 3), lambda t: [rand(t, 32)]),
    "router_topk": (lambda s: tk.router_topk(s, 3), lambda t: [rand(t, 32)]),
    "triangle_multiplication": (
        lambda x, mask, *w: tk.triangle_multiplication(x, mask, *w, "outgoing", eps=1e-5),
        _triangle,
    ),
}


def test_every_registered_op_has_a_case():
    assert {op.short_name for op in all_ops()} == set(CASES)


# Over 20 s each on two cores (most of it JAX compiling the op and its backward at three
# sizes): in the default run (and CI), deselected by -m "not slow".
SLOW = {
    "dot_product_attention",
    "kimi_delta_attention",
    "mhc_pre",
    "mhc_fused_post_pre",
    "triangle_multiplication",
}


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n
        for n in (op.short_name for op in all_ops())
    ],
)
def test_every_op_compiles_at_three_sizes_forward_and_backward(name):
    model, make = CASES[name]
    compile_dynamic_matches_eager(model, [make(t) for t in T], rtol=1e-4, atol=1e-4)


# dynamic=True and mark_dynamic on the ops with a derived fake (no shape rule: the trace
# itself is symbolic) and on one with a shape rule of its own.
@pytest.mark.parametrize("mode", [True, MARK_DYNAMIC], ids=["dynamic", "mark_dynamic"])
@pytest.mark.parametrize("name", ["layer_norm", "ragged_gather", "dot_product_attention"])
def test_dynamic_true_and_mark_dynamic(name, mode):
    model, make = CASES[name]
    compile_dynamic_matches_eager(model, [make(t) for t in T], dynamic=mode, rtol=1e-4, atol=1e-4)
