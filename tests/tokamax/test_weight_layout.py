"""weight_layout="out_in": the GLU and the fused loss take nn.Linear's [out, in] weights as they
are, with no weight-sized allocation per call (torch's allocator, counted by the profiler, and
XLA's buffers, read from the compiled executables), and give the [in, out] results."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from tests.helpers import rand
from tests.kernels.checks import opcheck
from tests.tokamax.util import check_against_reference
from tpu_kernels import tokamax as tk
from tpu_kernels.tokamax import glu, loss
from tpu_kernels.tokamax.glu import reference as glu_reference
from tpu_kernels.tokamax.loss import reference as loss_reference

# ---- the same results as the [in, out] layout, against float64 ----------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_glu_out_in_matches_the_float64_reference(dtype):
    k, n = 16, 24
    check_against_reference(
        "gated_linear_unit",
        "out_in",
        lambda x, a, b: tk.gated_linear_unit(x, a, b, activation="silu", weight_layout="out_in"),
        lambda x, a, b: glu_reference.gated_linear_unit(x, a.T, b.T, activation="silu"),
        [rand(2, 5, k, dtype=dtype), rand(n, k, dtype=dtype, scale=k**-0.5), rand(n, k, dtype=dtype, scale=k**-0.5)],
        dtype,
        out_scale=2,
        grad_scale=[4, 10, 10],  # dW sums over the 10 rows
    )  # fmt: skip


@pytest.mark.parametrize("reduction", ["sum", "none"])
def test_loss_out_in_matches_the_float64_reference(reduction):
    b, h, v = 12, 32, 40
    check_against_reference(
        "linear_softmax_cross_entropy_loss",
        f"out_in_{reduction}",
        lambda x, w, y: tk.linear_softmax_cross_entropy_loss(x, y, w, reduction=reduction, weight_layout="out_in"),
        lambda x, w, y: loss_reference.linear_softmax_cross_entropy_loss(x, y, w.T, reduction=reduction),
        [rand(b, h), rand(v, h, scale=h**-0.5), torch.randint(0, v, (b,))],
        torch.float32,
        out_scale=b if reduction == "sum" else 4,
        grad_scale=[2, b],
    )  # fmt: skip


def test_opcheck_out_in():
    x = rand(3, 8, 16, requires_grad=True)
    wg, wu = rand(24, 16, requires_grad=True), rand(24, 16, requires_grad=True)
    opcheck(glu.gated_linear_unit_op, (x, wg, wu), {"activation": "silu", "weight_layout": "out_in"})
    xs, w = rand(10, 16, requires_grad=True), rand(40, 16, requires_grad=True)
    labels = torch.randint(0, 40, (10,), dtype=torch.int32)
    opcheck(loss.linear_softmax_cross_entropy_loss_op, (xs, labels, w), {"weight_layout": "out_in"})


def test_bad_layouts_say_what_to_do():
    with pytest.raises(ValueError, match=r"weight_layout='NK'; use 'in_out' \(Tokamax's \[K, N\]\)"):
        tk.gated_linear_unit(rand(4, 8), rand(6, 8), rand(6, 8), weight_layout="NK")
    with pytest.raises(ValueError, match=r"weight_layout='out_in' takes the pair weight=w_gate \[N, K\]"):
        tk.gated_linear_unit(rand(4, 8), rand(8, 2, 6), weight_layout="out_in")
    with pytest.raises(
        ValueError, match=r"needs weight and weight_up \[N, K=8\]; got \(\(8, 6\), \(8, 6\)\)"
    ):
        tk.gated_linear_unit(rand(4, 8), rand(8, 6), rand(8, 6), weight_layout="out_in")
    with pytest.raises(ValueError, match=r"weight_layout='T'; use 'in_out' \(Tokamax's \[H, V\]\)"):
        tk.linear_softmax_cross_entropy_loss(
            rand(4, 8), torch.zeros(4, dtype=torch.long), rand(6, 8), weight_layout="T"
        )
    with pytest.raises(
        ValueError, match=r"weight \[V, H\] \(weight_layout='out_in'\).*got \(4, 8\), \(4,\), \(8, 6\)"
    ):
        tk.linear_softmax_cross_entropy_loss(
            rand(4, 8), torch.zeros(4, dtype=torch.long), rand(8, 6), weight_layout="out_in"
        )
    with pytest.raises(ValueError, match="unless V % 2048 == 0.*and V = 6"):
        tk.linear_softmax_cross_entropy_loss(
            rand(4, 8), torch.zeros(4, dtype=torch.long), rand(6, 8), weight_layout="out_in", implementation="chunked_xla"
        )  # fmt: skip


# ---- bytes: no weight-sized allocation per call ---------------------------------------

V, H, B = 2048, 256, 16  # the LM head (2 MiB in float32) is 64x one row block of logits
K, N = 256, 512


def torch_allocations(step) -> list[int]:
    """The bytes of every allocation torch's CPU allocator makes during `step()` (the
    profiler's per-op self memory: each allocation is made inside the op that asks for it)."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    return [e.self_cpu_memory_usage for e in prof.events() if e.self_cpu_memory_usage > 0]


def _glu_step(layout: str):
    """One forward and backward of the GLU on an nn.Linear pair's [N, K] weights, passed as
    `layout` says: "out_in" as they are, "transpose" as `weight.T` (the [in, out] way)."""
    torch.manual_seed(0)
    wg, wu = (torch.nn.Parameter(torch.randn(N, K) * K**-0.5) for _ in range(2))
    x = torch.randn(B, K, requires_grad=True)

    def step():
        wg.grad = wu.grad = x.grad = None
        if layout == "out_in":
            out = tk.gated_linear_unit(x, wg, wu, activation="silu", weight_layout="out_in")
        else:
            out = tk.gated_linear_unit(x, wg.T, wu.T, activation="silu")
        out.square().sum().backward()
        assert wg.grad.shape == (N, K) and wg.grad.is_contiguous()

    step()  # compile outside the count
    return step, wg.numel() * wg.element_size()


def _loss_step(layout: str):
    """The LM-head path: a forward and backward of the fused loss on an nn.Linear(H, V)'s
    [V, H] weight, passed as `layout` says."""
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(V, H) * H**-0.5)
    x = torch.randn(B, H, requires_grad=True)
    labels = torch.randint(0, V, (B,))

    def step():
        w.grad = x.grad = None
        if layout == "out_in":
            out = tk.linear_softmax_cross_entropy_loss(x, labels, w, weight_layout="out_in")
        else:
            out = tk.linear_softmax_cross_entropy_loss(x, labels, w.T)
        out.backward()
        assert w.grad.shape == (V, H) and w.grad.is_contiguous()

    step()
    return step, w.numel() * w.element_size()


@pytest.mark.parametrize("make", [_loss_step, _glu_step], ids=["lm_head_loss", "glu"])
def test_a_step_allocates_no_weight_sized_torch_tensor(make):
    """With "out_in" torch allocates nothing weight-sized in a forward and backward (the
    gradients are XLA's outputs, handed over by DLPack); passing `weight.T` copies each
    weight in the forward, again in the backward, and the gradient back into the
    parameter's layout, which the count must see (so it can fail)."""
    new, weight_bytes = make("out_in")
    old, _ = make("transpose")
    new_allocs, old_allocs = torch_allocations(new), torch_allocations(old)
    print(f"torch allocations per step: out_in {sum(new_allocs)} bytes, weight.T {sum(old_allocs)} bytes, "
          f"one weight {weight_bytes} bytes")  # fmt: skip
    assert [a for a in new_allocs if a >= weight_bytes] == []
    assert sum(new_allocs) < weight_bytes  # activations and small buffers only, all together
    assert len([a for a in old_allocs if a >= weight_bytes]) >= 2


S = jax.ShapeDtypeStruct


def _xla_bytes(fn, *specs) -> tuple[int, int]:
    """(temporary, output) bytes of `fn` compiled by XLA for these argument shapes."""
    stats = jax.jit(fn).lower(*specs).compile().memory_analysis()
    return stats.temp_size_in_bytes, stats.output_size_in_bytes


def _backward_fn(op, statics: dict):
    grads = [p.name for p in op.backward_op.signature.params if p.name.startswith("grad_")]
    tensors = [
        p.name for p in op.backward_op.signature.params if p.is_tensor and not p.name.startswith("grad_")
    ]

    def fn(*arrays):
        return op.backward_op.fn(**dict(zip(grads + tensors, arrays)), **statics)

    return fn


f32 = jnp.float32


@pytest.mark.parametrize("reduction", ["sum", "mean", "none"])
def test_xla_makes_no_transposed_copy_of_the_lm_head(reduction):
    """Inside the kernel: the transpose of an "out_in" weight is folded into the matmuls, so
    XLA's temporaries stay below a quarter of the weight, forward and backward, and the
    backward's only weight-sized buffer is the gradient itself (its output)."""
    op = loss.linear_softmax_cross_entropy_loss_op
    statics = dict(reduction=reduction, weight_layout="out_in", implementation="xla")  # CPU's choice
    w_bytes = V * H * 4
    temp, out = _xla_bytes(lambda x, y, w: op.fn(x=x, labels=y, weight=w, **statics),
                           S((B, H), f32), S((B,), jnp.int32), S((V, H), f32))  # fmt: skip
    assert temp < w_bytes // 4 and out < w_bytes // 4, (temp, out)
    grad = S((B,) if reduction == "none" else (), f32)
    temp, out = _xla_bytes(
        _backward_fn(op, statics), grad, S((B, H), f32), S((B,), jnp.int32), S((V, H), f32)
    )
    assert temp < w_bytes // 4, temp
    assert w_bytes <= out < w_bytes + w_bytes // 4, out  # dW (and the small dx)


def test_xla_makes_no_transposed_copy_of_the_glu_weights():
    op = glu.gated_linear_unit_op
    statics = dict(activation="silu", weight_layout="out_in", precision=None, implementation="xla")
    w_bytes = N * K * 4
    temp, out = _xla_bytes(lambda x, a, b: op.fn(x=x, weight=a, weight_up=b, **statics),
                           S((B, K), f32), S((N, K), f32), S((N, K), f32))  # fmt: skip
    assert temp < w_bytes // 4 and out < w_bytes // 4, (temp, out)
    temp, out = _xla_bytes(
        _backward_fn(op, statics), S((B, N), f32), S((B, K), f32), S((N, K), f32), S((N, K), f32)
    )
    assert temp < w_bytes // 4, temp
    assert 2 * w_bytes <= out < 2 * w_bytes + w_bytes // 4, out  # dW_gate, dW_up (and dx)
