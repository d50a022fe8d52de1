"""A JAX op's `visible_kernel=`: the body without its residuals, which a TPU call that needs no
gradient runs in place of the full body (linear_cross_entropy's: the loss without the hidden
gradient's matmul, half the forward's work); checked where the op is defined."""

import jax
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from tpu_kernels import tpu_kernel
from tpu_kernels.errors import OpDefinitionError
from tpu_kernels.kernels import FAMILIES, linear_cross_entropy
from tpu_kernels.kernels.linear_cross_entropy import pallas
from tpu_kernels.runtime.devices.jax_exec import pallas_interpret


def _body(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    return 2 * x, x.sum(-1)


def _twice(x: jax.Array) -> jax.Array:
    return 2 * x


def test_a_visible_kernel_is_checked_where_the_op_is_defined():
    with pytest.raises(OpDefinitionError, match=r"bad_params.*\['y'\].*\['x'\]"):
        tpu_kernel("test_jax_visible::bad_params", outputs=("out", "total"), residuals=("total",),
                   visible_kernel=lambda y: 2 * y)(_body)  # fmt: skip
    with pytest.raises(OpDefinitionError, match=r"not_callable.*must be a JAX function"):
        tpu_kernel("test_jax_visible::not_callable", outputs=("out", "total"), residuals=("total",),
                   visible_kernel=3)(_body)  # fmt: skip
    with pytest.raises(OpDefinitionError, match=r"no_residuals.*declares none"):
        tpu_kernel("test_jax_visible::no_residuals", visible_kernel=_twice)(_twice)


def _pallas_outputs(fn, *specs, **kwargs) -> list[int]:
    """How many outputs each pallas_call in fn's program has."""
    jaxpr = jax.make_jaxpr(lambda *a: fn(*a, **kwargs))(*specs)
    return [len(e.outvars) for e in jaxpr.eqns if e.primitive.name == "pallas_call"]


def test_the_loss_alone_skips_the_hidden_gradients_matmul_and_gives_the_ops_loss():
    specs = (
        jax.ShapeDtypeStruct((64, 128), "bfloat16"),
        jax.ShapeDtypeStruct((1000, 128), "bfloat16"),
        jax.ShapeDtypeStruct((64,), "int32"),
    )
    assert _pallas_outputs(pallas.linear_cross_entropy, *specs) == [3]  # lse, target, hidden gradient
    assert _pallas_outputs(pallas.linear_cross_entropy_loss, *specs) == [2]  # lse, target
    fam = FAMILIES["linear_cross_entropy"]
    for statics in ({}, {"reduction": "none", "softcap": 2.0}, {"reduction": "sum", "label_smoothing": 0.1}):
        hidden, weight, labels = fam.inputs((40, 64, 300), torch.float32, torch.device("cpu"))
        want = linear_cross_entropy(hidden, weight, labels, **statics)
        h, w, y = (jax.numpy.asarray(t.numpy()) for t in (hidden, weight, labels))
        with pallas_interpret(True):
            got = pallas.linear_cross_entropy_loss(h, w, y, **statics)
        torch.testing.assert_close(torch.from_numpy(jax.device_get(got).copy()), want, rtol=1e-5, atol=1e-5)


def test_the_tpu_kernel_runs_the_visible_kernel_for_a_call_needing_no_gradient():
    """The op's TPU kernel keeps the visible kernel, and its visible op (torch_tpu's real
    jax_op, whose fake exports the body for the TPU without a chip) returns the loss alone."""
    pytest.importorskip("torch_tpu")
    from tpu_kernels.lowering.target import targeting

    op = FAMILIES["linear_cross_entropy"].op
    kernel = op._kernels["PrivateUse1"]
    assert kernel.visible_fn is pallas.linear_cross_entropy_loss and kernel.visible_only
    visible = kernel.visible_op("default")
    mode = FakeTensorMode()
    hidden, weight, labels = FAMILIES["linear_cross_entropy"].inputs(
        (40, 64, 300), torch.float32, torch.device("cpu")
    )
    fakes = [mode.from_tensor(t) for t in (hidden, weight, labels.int())]
    with mode, targeting(None):
        out = visible(*fakes)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    assert [tuple(o.shape) for o in outs] == [()]


def test_attention_without_its_residual_writes_no_lse_and_gives_the_ops_output():
    """attention's visible kernel: the forward's one pallas_call with out alone (lse is the
    backward's residual), equal to the op's output at a ragged, grouped, windowed shape; the
    TPU kernel keeps it."""
    from tpu_kernels.kernels import attention
    from tpu_kernels.kernels.attention import pallas as attn

    spec = jax.ShapeDtypeStruct((1, 4, 200, 32), "bfloat16")
    kv = jax.ShapeDtypeStruct((1, 2, 200, 32), "bfloat16")
    assert _pallas_outputs(attn.attention, spec, kv, kv, causal=True) == [2]
    assert _pallas_outputs(attn.attention_out, spec, kv, kv, causal=True) == [1]
    gen = torch.Generator().manual_seed(7)
    q, k, v = torch.randn(1, 4, 200, 32, generator=gen), *torch.randn(2, 1, 2, 200, 32, generator=gen)
    for statics in ({"causal": True}, {"causal": True, "window": 50, "block_q": 64, "block_k": 128}, {}):
        want = attention(q, k, v, **statics)
        with pallas_interpret(True):
            got = attn.attention_out(*(jax.numpy.asarray(t.numpy()) for t in (q, k, v)), **statics)
        torch.testing.assert_close(torch.from_numpy(jax.device_get(got).copy()), want, rtol=1e-5, atol=1e-5)
    kernel = FAMILIES["attention"].op._kernels["PrivateUse1"]
    assert kernel.visible_fn is attn.attention_out and kernel.visible_only
