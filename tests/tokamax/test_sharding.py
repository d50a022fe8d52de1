"""Every Tokamax op on DTensors, on 2 real gloo processes: each op's declared rule
(`sharding=` in its family's op.py) runs a sharded placement locally (zero collectives),
forward and backward, equal to the op on the full tensors; the weight gradients of
Replicate weights with sharded rows come back Partial (derived backward rules).

One spawn runs every case in sequence (process start, gloo and JAX compiles dominate).
The harness is tests/test_sharding.py's.

And in this process, every strategy of every op's rule, simulated on 2 and 3 shards
at the op's small calls (`<op>_small` in its family's examples.py), forward and
backward (`tpu_kernels.testing.assert_sharding_rule`): the ops come from the registry,
so a new family's ops are simulated by registering it.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.test_sharding import _case, run_on_2_processes
from tpu_kernels import testing
from tpu_kernels.tokamax import FAMILIES

I32 = torch.int32


def _partial(t: torch.Tensor) -> bool:
    from torch.distributed.tensor import Partial

    return isinstance(t.grad.placements[0], Partial)


def _cases(rank: int, port: int) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Partial, Replicate, Shard

    from tpu_kernels import tokamax as tk

    dist.init_process_group("gloo", rank=rank, world_size=2, init_method=f"tcp://127.0.0.1:{port}")
    try:
        mesh = init_device_mesh("cpu", (2,))
        torch.manual_seed(0)  # the same full tensors on both ranks
        S0, S1, S2, R = Shard(0), Shard(1), Shard(2), Replicate()
        rn = torch.randn

        # normalization: rows; weight and bias gradients Partial
        x, w, b = rn(7, 16), rn(16), rn(16)
        _, (_, dw, db) = _case(mesh, "layer_norm S(0)", tk.layer_norm, [x, w, b], [S0, R, R], local=True)
        assert _partial(dw) and _partial(db), (dw.grad.placements, db.grad.placements)
        _case(mesh, "rms_norm 3-D S(1)", tk.rms_norm, [rn(3, 5, 16), w], [S1, R], local=True)
        # normalised over dim 0: sharding dim 1 is local, dim 0 is gathered
        ln0 = lambda x, w: tk.layer_norm(x, w, dim=0)  # noqa: E731
        _case(mesh, "layer_norm dim=0 S(1)", ln0, [rn(16, 6), w], [S1, R], local=True)
        _case(mesh, "layer_norm dim=0 S(0)", ln0, [rn(16, 6), w], [S0, R], local=False)

        # gated linear unit: tokens (weights Replicate, gradient Partial), or output columns
        glu = lambda x, w: tk.gated_linear_unit(x, w, activation="silu")  # noqa: E731
        x, w = rn(2, 7, 16), rn(16, 2, 8) * 0.25
        _, (_, dw) = _case(mesh, "gated_linear_unit S(1) tokens", glu, [x, w], [S1, R], local=True)
        assert _partial(dw)
        _, (dx, _) = _case(mesh, "gated_linear_unit weight S(2) columns", glu, [x, w], [R, S2], local=True)
        assert _partial(dx)

        # attention: batch; heads (kv-heads alike); MQA heads with key/value Replicate
        q, k, v = rn(4, 6, 4, 8), rn(4, 5, 2, 8), rn(4, 5, 2, 8)
        bias = rn(1, 4, 6, 5)  # broadcast over batch: Replicate, its gradient Partial
        dpa = lambda q, k, v, bias: tk.dot_product_attention(q, k, v, bias)  # noqa: E731
        _, d = _case(
            mesh, "dot_product_attention S(0) batch", dpa, [q, k, v, bias], [S0, S0, S0, R], local=True
        )
        assert _partial(d[3])
        causal = lambda q, k, v: tk.dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
        _case(mesh, "dot_product_attention S(2) heads", causal, [q, k, v], [S2, S2, S2], local=True)
        _, (_, dk, _) = _case(
            mesh,
            "dot_product_attention MQA heads",
            causal,
            [q, k[:, :, :1], v[:, :, :1]],
            [S2, R, R],
            local=True,
        )
        assert _partial(dk)

        # ragged_dot: columns of rhs, or the contraction (Partial); rows would need global groups
        lhs, rhs, gs = rn(9, 16), rn(3, 16, 8) * 0.25, torch.tensor([3, 4, 1], dtype=I32)
        _, (dl, _, _) = _case(
            mesh, "ragged_dot rhs S(2)", tk.ragged_dot, [lhs, rhs, gs], [R, S2, R], local=True
        )
        assert _partial(dl)
        out, _ = _case(mesh, "ragged_dot K S(1)", tk.ragged_dot, [lhs, rhs, gs], [S1, S1, R], local=True)
        assert isinstance(out.placements[0], Partial), out.placements
        _case(mesh, "ragged_dot lhs rows S(0)", tk.ragged_dot, [lhs, rhs, gs], [S0, R, R], local=False)
        # (ragged_dot's dimension numbers: JAX has no gradient of the contracted-ragged form)
        general = lambda lhs, rhs, gs: tk.ragged_dot_general(  # noqa: E731
            lhs,
            rhs,
            gs,
            lhs_contracting_dims=[1],
            rhs_contracting_dims=[1],
            lhs_ragged_dims=[0],
            rhs_group_dims=[0],
        )
        _, (dl, _, _) = _case(
            mesh, "ragged_dot_general rhs S(2)", general, [lhs, rhs, gs], [R, S2, R], local=True
        )
        assert _partial(dl)
        out, _ = _case(mesh, "ragged_dot_general K S(1)", general, [lhs, rhs, gs], [S1, S1, R], local=True)
        assert isinstance(out.placements[0], Partial), out.placements

        # fused LM-head loss: rows; "sum" is Partial, "none" sharded, "mean" gathered
        x, labels, w = rn(7, 16), torch.randint(0, 10, (7,)), rn(16, 10) * 0.25
        for reduction, local in (("none", True), ("sum", True), ("mean", False)):

            def loss(x, labels, w, reduction=reduction):
                return tk.linear_softmax_cross_entropy_loss(x, labels, w, reduction=reduction)

            out, (_, _, dw) = _case(
                mesh, f"loss {reduction} S(0)", loss, [x, labels, w], [S0, S0, R], local=local
            )
            if reduction == "sum":
                assert isinstance(out.placements[0], Partial) and _partial(dw), out.placements

        # triangle multiplication: output channels
        n, c, h, dd = 5, 8, 4, 6
        tri_args = [
            rn(n, n, c),
            torch.rand(n, n) > 0.2,
            rn(c, 2, h) * 0.3,
            rn(c, 2, h) * 0.3,
            rn(h, dd) * 0.5,
            rn(c, dd) * 0.3,
            rn(c),
            rn(c),
            rn(h),
            rn(h),
        ]
        tri = lambda *a: tk.triangle_multiplication(*a, "outgoing")  # noqa: E731
        _case(
            mesh,
            "triangle_multiplication D",
            tri,
            tri_args,
            [R] * 4 + [S1, S1] + [R] * 4,
            local=True,
            atol=1e-4,
        )

        # routing: rows (no backward: the scores go in detached)
        scores = rn(7, 12)
        top_k = lambda s, n: tk.top_k(s.detach(), 3, n)  # noqa: E731
        _case(mesh, "top_k S(0)", top_k, [scores, torch.randint(1, 13, (7,))], [S0, S0], local=True)
        _case(mesh, "router_topk S(0)", lambda s: tk.router_topk(s.detach(), 3), [scores], [S0], local=True)

        # MoE gather and combine: hidden columns; the combine also by whole tokens
        x, idx = rn(10, 16), torch.randint(0, 10, (8,))
        lo_hi = [torch.tensor([0], dtype=I32), torch.tensor([8], dtype=I32)]
        _case(mesh, "ragged_gather S(1)", tk.ragged_gather, [x, idx, *lo_hi], [S1, R, R, R], local=True)
        reduce = lambda x, i, w, m: tk.ragged_gather_reduce(x, i, w, m, 2)  # noqa: E731
        red_args = [x, idx, rn(8), torch.rand(8) > 0.3]
        _, d = _case(mesh, "ragged_gather_reduce S(1)", reduce, red_args, [S1, R, R, R], local=True)
        assert _partial(d[2])
        _, d = _case(mesh, "ragged_gather_reduce tokens S(0)", reduce, red_args, [R, S0, S0, S0], local=True)
        assert _partial(d[0])

        # DeepSeek RoPE: tokens (positions alike) or heads
        rope_args = [rn(6, 2, 128), torch.randint(0, 16, (6,), dtype=I32), rn(16, 64)]
        _case(mesh, "deepseek_rope S(0) tokens", tk.deepseek_rope, rope_args, [S0, S0, R], local=True)
        _case(mesh, "deepseek_rope S(1) heads", tk.deepseek_rope, rope_args, [S1, R, R], local=True)

        # mHC: tokens (bfloat16 streams: outputs compared to bfloat16 rounding)
        t, m, hh = 5, 4, 32
        consts = (1e-6, 1e-6, 1e-6, 2.0, 4)
        bf = torch.bfloat16
        pre_args = [
            rn(t, m * hh).to(bf),
            rn(m * (m + 2), m * hh) * (m * hh) ** -0.5,
            torch.rand(3) + 0.5,
            rn(m * (m + 2)),
        ]
        _, d = _case(
            mesh, "mhc_pre S(0)", lambda *a: tk.mhc_pre(*a, *consts), pre_args, [S0, R, R, R], local=True
        )
        assert _partial(d[1])
        post_args = [rn(t, hh).to(bf), rn(t, m * hh).to(bf), rn(t, m), torch.rand(t, m, m)]
        _case(mesh, "mhc_post S(0)", tk.mhc_post, post_args, [S0] * 4, local=True)
        _case(
            mesh,
            "mhc_fused_post_pre S(0)",
            lambda *a: tk.mhc_fused_post_pre(*a, *consts),
            post_args + pre_args[1:],
            [S0] * 4 + [R] * 3,
            local=True,
        )

        # Kimi delta attention: batch, or heads
        hq, bq, tq, kq = 2, 4, 5, 8
        kda_args = [
            rn(hq, bq, tq, kq),
            rn(hq, bq, tq, kq),
            rn(hq, bq, tq, kq),
            -F.softplus(rn(hq, bq, tq, kq)),
            torch.sigmoid(rn(hq, bq, tq)),
        ]
        kda = lambda *a: tk.kimi_delta_attention(*a, use_qk_l2norm=True)  # noqa: E731
        _case(mesh, "kimi_delta_attention S(1) batch", kda, kda_args, [S1] * 5, local=True, atol=1e-4)
        _case(mesh, "kimi_delta_attention S(0) heads", kda, kda_args, [S0] * 5, local=True, atol=1e-4)
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_every_tokamax_op_on_2_processes():
    run_on_2_processes(_cases)


@pytest.mark.slow  # about 5 minutes for all of them here: each shard's shapes compile
@pytest.mark.parametrize("op", [op for f in FAMILIES.values() for op in f.ops], ids=lambda op: op.name)
def test_every_tokamax_rule_passes_the_simulation(op):
    import torch.distributed.tensor  # noqa: F401  (registers the pending rules)

    report = testing.assert_sharding_rule(op)  # at op.sharding_examples(): its family's <op>_small
    assert {n for _, _, n in report.checked} == {2, 3}
    if op.backward_op is not None:
        assert any(name == op.backward_op.name for name, _, _ in report.checked), report.checked
