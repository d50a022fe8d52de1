"""Tokamax's ops through tpu_kernels.tokamax, beside their torch counterparts.

| benchmark | tokamax op | torch baseline |
|---|---|---|
| tokamax_attention | dot_product_attention (causal, GQA) | F.scaled_dot_product_attention (repeated kv heads) |
| tokamax_rms_norm | rms_norm | F.rms_norm |
| tokamax_layer_norm | layer_norm | F.layer_norm |
| tokamax_glu | gated_linear_unit (SwiGLU) | silu(x @ w_gate) * (x @ w_up) |
| tokamax_loss | linear_softmax_cross_entropy_loss | F.cross_entropy(x @ w) |

The implementation Tokamax runs is shown beside the candidate ("xla" on CPU).
On CPU the sizes are cut down (the real-workload sizes of
tpu_kernels/tokamax/shapes.py are used on accelerators).
"""

import torch
import torch.nn.functional as F
from _common import randn

from tpu_kernels import bench
from tpu_kernels import tokamax as tk
from tpu_kernels.tokamax import reference, shapes

CPU_ATTENTION = {
    "gqa_512": dict(batch=1, seq_q=512, seq_kv=512, heads=8, kv_heads=2, head_dim=64, head_dim_v=64)
}
CPU_NORM = {"2kx1k": (2048, 1024)}
CPU_GLU = {"1kx512_to_1k": ((1024, 512), 1024)}
CPU_LOSS = {"512_tokens_8k_vocab": (512, 256, 8192)}


def _impl(op: str, device_type: str) -> str:
    return tk.resolve_implementation(op, torch.device(device_type))


def _candidates(name, op_fn, torch_fn, device_type, quick):
    def make(p):
        cands = [
            bench.Candidate("tokamax", op_fn, primary=True, implementation=_impl(name, device_type)),
            bench.Candidate("torch", torch_fn),
        ]
        if not quick:
            cands.append(bench.Candidate("torch.compile", torch.compile(torch_fn, dynamic=False)))
        return cands

    return make


def _sdpa(q, k, v):
    """torch's attention in Tokamax's [batch, seq, heads, head_dim] layout (kv heads repeated)."""
    rep = q.shape[2] // k.shape[2]
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)


def benchmarks(quick: bool, device_type: str) -> list[bench.Benchmark]:
    cpu = device_type == "cpu"
    dtypes = [torch.float32] if cpu else [torch.bfloat16]
    attn_shapes = CPU_ATTENTION if cpu else shapes.ATTENTION_BENCH
    attn = list(attn_shapes)  # points name the shape; the sizes are looked up
    norm = list((CPU_NORM if cpu else shapes.NORM_BENCH).values())
    glu = list((CPU_GLU if cpu else shapes.GLU_BENCH).values())
    loss = list((CPU_LOSS if cpu else shapes.LOSS_BENCH).values())
    if quick:
        attn, norm, glu, loss = attn[:1], norm[:1], glu[:1], loss[:1]

    def attn_inputs(p, dev):
        s = attn_shapes[p["shape"]]
        return (
            randn(s["batch"], s["seq_q"], s["heads"], s["head_dim"], dtype=p["dtype"], device=dev),
            randn(s["batch"], s["seq_kv"], s["kv_heads"], s["head_dim"], dtype=p["dtype"], device=dev),
            randn(s["batch"], s["seq_kv"], s["kv_heads"], s["head_dim_v"], dtype=p["dtype"], device=dev),
        )

    def attn_flops(p):
        s = attn_shapes[p["shape"]]
        # QK^T and PV, halved by the causal mask
        return 2 * s["batch"] * s["heads"] * s["seq_q"] * s["seq_kv"] * (s["head_dim"] + s["head_dim_v"]) / 2

    def glu_inputs(p, dev):
        (m, k), n = p["shape"]
        return (
            randn(m, k, dtype=p["dtype"], device=dev),
            randn(k, 2, n, dtype=p["dtype"], device=dev, scale=k**-0.5),
        )

    def loss_inputs(p, dev):
        b, h, v = p["shape"]
        labels = torch.randint(0, v, (b,), device=dev)
        return (
            randn(b, h, dtype=p["dtype"], device=dev),
            labels,
            randn(h, v, dtype=p["dtype"], device=dev, scale=h**-0.5),
        )

    def norm_inputs(p, dev):
        return (
            randn(*p["shape"], dtype=p["dtype"], device=dev),
            randn(p["shape"][-1], dtype=p["dtype"], device=dev),
        )

    def norm_bytes(p):
        n = p["shape"][0] * p["shape"][1]
        return 2 * n * p["dtype"].itemsize

    return [
        bench.Benchmark(
            name="tokamax_attention",
            points=bench.grid(shape=attn, dtype=dtypes),
            inputs=attn_inputs,
            candidates=_candidates(
                "dot_product_attention",
                lambda q, k, v: tk.dot_product_attention(q, k, v, is_causal=True),
                _sdpa,
                device_type,
                quick,
            ),
            reference=lambda q, k, v: reference.dot_product_attention(q, k, v, is_causal=True),
            flops=attn_flops,
            tolerance_scale=lambda p: 4.0,
        ),
        bench.Benchmark(
            name="tokamax_rms_norm",
            points=bench.grid(shape=norm, dtype=dtypes),
            inputs=norm_inputs,
            candidates=_candidates(
                "layer_norm",
                lambda x, w: tk.rms_norm(x, w),
                lambda x, w: F.rms_norm(x, (x.shape[-1],), w, 1e-6),
                device_type,
                quick,
            ),
            reference=lambda x, w: reference.rms_norm(x, w),
            bytes=norm_bytes,
            tolerance_scale=lambda p: 3.0,
        ),
        bench.Benchmark(
            name="tokamax_layer_norm",
            points=bench.grid(shape=norm, dtype=dtypes),
            inputs=norm_inputs,
            candidates=_candidates(
                "layer_norm",
                lambda x, w: tk.layer_norm(x, w),
                lambda x, w: F.layer_norm(x, (x.shape[-1],), w, None, 1e-6),
                device_type,
                quick,
            ),
            reference=lambda x, w: reference.layer_norm(x, w),
            bytes=norm_bytes,
            tolerance_scale=lambda p: 3.0,
        ),
        bench.Benchmark(
            name="tokamax_glu",
            points=bench.grid(shape=glu, dtype=dtypes),
            inputs=glu_inputs,
            candidates=_candidates(
                "gated_linear_unit",
                lambda x, w: tk.gated_linear_unit(x, w, activation="silu"),
                lambda x, w: F.silu(x @ w[:, 0]) * (x @ w[:, 1]),
                device_type,
                quick,
            ),
            reference=lambda x, w: reference.gated_linear_unit(x, w, activation="silu"),
            flops=lambda p: 2 * 2 * p["shape"][0][0] * p["shape"][0][1] * p["shape"][1],
            tolerance_scale=lambda p: 8.0,
        ),
        bench.Benchmark(
            name="tokamax_loss",
            points=bench.grid(shape=loss, dtype=dtypes),
            inputs=loss_inputs,
            candidates=_candidates(
                "linear_softmax_cross_entropy_loss",
                lambda x, y, w: tk.linear_softmax_cross_entropy_loss(x, y, w),
                lambda x, y, w: F.cross_entropy(x @ w, y, reduction="sum"),
                device_type,
                quick,
            ),
            reference=lambda x, y, w: reference.linear_softmax_cross_entropy_loss(x, y, w),
            flops=lambda p: 2 * p["shape"][0] * p["shape"][1] * p["shape"][2],
            # a sum of B per-row losses: the absolute tolerance grows with B
            tolerance_scale=lambda p: float(p["shape"][0]),
        ),
    ]
