"""Tokamax's ops through tpu_kernels.tokamax, beside their torch counterparts.

| benchmark | tokamax op | torch baseline |
|---|---|---|
| tokamax_attention | dot_product_attention (causal, GQA) | F.scaled_dot_product_attention (repeated kv heads) |
| tokamax_rms_norm | rms_norm | F.rms_norm |
| tokamax_layer_norm | layer_norm | F.layer_norm |
| tokamax_glu | gated_linear_unit (SwiGLU) | silu(x @ w_gate) * (x @ w_up) |
| tokamax_loss | linear_softmax_cross_entropy_loss | F.cross_entropy(x @ w) |
| tokamax_<op> for ragged_dot, triangle_multiplication, top_k, router_topk, ragged_gather, ragged_gather_reduce, deepseek_rope, mhc_pre, mhc_post, mhc_fused_post_pre, kimi_delta_attention | the op | its torch formula (tpu_kernels/tokamax/<family>/reference.py) |

| tokamax_<op> for every other op of a registered family (tokamax.FAMILIES) | the op | its family's reference, on the op's first small example call (`examples.<op>_small`) |

The last two rows' ops are timed at one modest size each (their first output when they
return several), on every device; the torch formulas are written for clarity
(loops over groups, a token-by-token recurrence), so read them as a correct
baseline rather than a tuned one.

The implementation Tokamax runs is shown beside the candidate ("xla" on CPU).
The written cases' reduced sizes (CPU_* below: a CPU's default run) are cut down; a
full run (accelerators, or `--full`) takes the real-workload sizes of each family's
shapes.py (tpu_kernels/tokamax/<family>/shapes.py). The dtype follows the device:
float32 on a CPU, bfloat16 elsewhere.
"""

import inspect

import torch
import torch.nn.functional as F
from _common import randn

from tpu_kernels import bench
from tpu_kernels import tokamax as tk
from tpu_kernels.testing import dot_scale
from tpu_kernels.tokamax import (
    attention,
    gather,
    glu,
    kda,
    loss,
    mhc,
    normalization,
    ragged,
    rope,
    topk,
    triangle,
)
from tpu_kernels.tokamax.registry import FAMILIES

CPU_ATTENTION = {
    "gqa_512": dict(batch=1, seq_q=512, seq_kv=512, heads=8, kv_heads=2, head_dim=64, head_dim_v=64)
}
CPU_NORM = {"2kx1k": (2048, 1024)}
CPU_GLU = {"1kx512_to_1k": ((1024, 512), 1024)}
CPU_LOSS = {"512_tokens_8k_vocab": (512, 256, 8192)}
# Formulas left without a torch.compile baseline: Dynamo unrolls kimi_delta_attention's
# token-by-token recurrence, and Inductor then spent 53 s compiling its one point on a 2-core
# CPU (a third of the main job's run there), for a baseline no model would use; the ragged
# dots' references split the rows by group sizes held in a tensor, on which Dynamo cannot guard
# (`Could not guard on data-dependent expression`): every run reported an error, not a time.
NOT_COMPILED = {"kimi_delta_attention", "ragged_dot", "ragged_dot_general"}


def _impl(op: str, device_type: str) -> str:
    return tk.resolve_implementation(op, torch.device(device_type))


def _candidates(name, op_fn, torch_fn, device_type, quick):
    def make(p):
        cands = [
            bench.Candidate("tokamax", op_fn, primary=True, implementation=_impl(name, device_type)),
            bench.Candidate("torch", torch_fn),
        ]
        if not quick:
            cands.append(bench.Candidate("torch.compile", bench.compiled_baseline(torch_fn)))
        return cands

    return make


def _sdpa(q, k, v):
    """torch's attention in Tokamax's [batch, seq, heads, head_dim] layout (kv heads repeated)."""
    rep = q.shape[2] // k.shape[2]
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)


def _first(fn):
    """An op returning several tensors, reduced to the one the benchmark checks."""
    return lambda *a: fn(*a)[0]


def _in_float32(fn):
    """The formula on float32 copies of mixed bfloat16/float32 inputs (torch's matmuls want one dtype)."""
    return lambda *a: fn(*(x.float() if x.is_floating_point() else x for x in a))


def _formula_benchmark(op, dtype, inputs, tokamax_fn, formula, device_type, quick, scale=1.0):
    """One point: the Tokamax op against its torch formula, which is also the float64 reference."""
    torch_fn = _in_float32(formula) if dtype == torch.bfloat16 else formula
    return bench.Benchmark(
        name=f"tokamax_{op}",
        points=[{"dtype": dtype}],
        inputs=lambda p, dev: inputs(dev),
        candidates=_candidates(op, tokamax_fn, torch_fn, device_type, quick),
        reference=formula,
        tolerance_scale=lambda p: scale,
    )


def _formula_benchmarks(quick: bool, device_type: str) -> tuple[list[bench.Benchmark], set[str]]:
    f32, bf16 = torch.float32, torch.bfloat16

    def r(*shape, dtype=f32, scale=1.0):
        return lambda dev: randn(*shape, dtype=dtype, device=dev, scale=scale)

    def ints(high, *shape):
        return lambda dev: torch.randint(0, high, shape, device=dev, dtype=torch.int32)

    def const(t):
        return lambda dev: t.to(dev)

    def make(*parts):
        return lambda dev: tuple(part(dev) for part in parts)

    groups = torch.tensor([96, 160, 0, 256], dtype=torch.int32)  # 512 rows, one empty group
    routes, valid = torch.randint(0, 1024, (2048,), dtype=torch.int32), torch.rand(2048) > 0.25
    n, c, h = 64, 64, 64  # triangle: pairs, channels, hidden
    t, m, hid = 256, 4, 256  # mHC: tokens, streams, hidden
    mhc_c = (1e-6, 1e-6, 1e-6, 2.0, 4)
    mhc_pre_in = (
        r(t, m * hid, dtype=bf16),
        r(m * (m + 2), m * hid, scale=(m * hid) ** -0.5),
        lambda dev: torch.rand(3, device=dev) + 0.5,
        r(m * (m + 2)),
    )
    mhc_post_in = (r(t, hid, dtype=bf16), r(t, m * hid, dtype=bf16), r(t, m), r(t, m, m))
    kda_in = (r(2, 1, 64, 32), r(2, 1, 64, 32), r(2, 1, 64, 32))
    kda_gates = (
        lambda dev: -F.softplus(randn(2, 1, 64, 32, dtype=f32, device=dev)),
        lambda dev: torch.sigmoid(randn(2, 1, 64, dtype=f32, device=dev)),
    )
    cases = [
        (
            "ragged_dot",
            f32,
            make(r(512, 256), r(4, 256, 256), const(groups)),
            tk.ragged_dot,
            ragged.reference.ragged_dot,
            dot_scale(256, f32),
        ),
        (
            "triangle_multiplication",
            f32,
            make(
                r(n, n, c),
                lambda dev: torch.rand(n, n, device=dev) > 0.2,
                r(c, 2, h, scale=c**-0.5),
                r(c, 2, h, scale=c**-0.5),
                r(h, c, scale=h**-0.5),
                r(c, c, scale=c**-0.5),
                r(c),
                r(c),
                r(h),
                r(h),
            ),
            lambda *a: tk.triangle_multiplication(*a, "outgoing"),
            lambda *a: triangle.reference.triangle_multiplication(*a, "outgoing"),
            16.0,
        ),
        (
            "top_k",
            f32,
            make(r(64, 4096)),
            lambda s: tk.top_k(s, 32)[1],
            lambda s: topk.reference.top_k(s, 32)[1],
            1.0,
        ),
        (
            "router_topk",
            f32,
            make(r(2048, 64)),
            _first(lambda s: tk.router_topk(s, 8)),
            _first(lambda s: topk.reference.router_topk(s, 8)),
            1.0,
        ),
        (
            "ragged_gather",
            f32,
            make(r(1024, 256), ints(1024, 2048), const(torch.tensor([0])), const(torch.tensor([2048]))),
            tk.ragged_gather,
            gather.reference.ragged_gather,
            1.0,
        ),
        (
            "ragged_gather_reduce",
            f32,
            make(r(1024, 256), const(routes), r(2048), const(valid)),
            lambda x, i, w, v: tk.ragged_gather_reduce(x, i, w, v, 8),
            lambda x, i, w, v: gather.reference.ragged_gather_reduce(x, i, w, v, 8),
            4.0,
        ),
        (
            "deepseek_rope",
            f32,
            make(r(512, 8, 128), ints(1024, 512), r(1024, 64)),
            tk.deepseek_rope,
            rope.reference.deepseek_rope,
            4.0,
        ),
        (
            "mhc_pre",
            bf16,
            make(*mhc_pre_in),
            _first(lambda *a: tk.mhc_pre(*a, *mhc_c)),
            _first(lambda *a: mhc.reference.mhc_pre(*a, *mhc_c)),
            2.0,
        ),
        ("mhc_post", bf16, make(*mhc_post_in), tk.mhc_post, mhc.reference.mhc_post, 4.0),
        (
            "mhc_fused_post_pre",
            bf16,
            make(*mhc_post_in, *mhc_pre_in[1:]),
            _first(lambda *a: tk.mhc_fused_post_pre(*a, *mhc_c)),
            lambda x, res, plm, crm, *_: mhc.reference.mhc_post(x, res, plm, crm),
            4.0,
        ),
        (
            "kimi_delta_attention",
            f32,
            make(*kda_in, *kda_gates),
            _first(lambda *a: tk.kimi_delta_attention(*a, use_qk_l2norm=True)),
            _first(lambda *a: kda.reference.kimi_delta_attention(*a, use_qk_l2norm=True)),
            8.0,
        ),
    ]
    return [
        # the compiled baseline only where compiling the formula is worth timing (NOT_COMPILED)
        _formula_benchmark(op, dtype, inputs, ours, theirs, device_type, quick or op in NOT_COMPILED, scale)
        for op, dtype, inputs, ours, theirs, scale in cases
    ], {op for op, *_ in cases}


def _written_benchmarks(quick: bool, device_type: str) -> tuple[list[bench.Benchmark], set[str]]:
    """The written cases, and the ops (short names) they time."""
    cpu = device_type == "cpu"
    dtypes = [torch.float32] if cpu else [torch.bfloat16]
    attn_shapes = {**attention.shapes.BENCH, **CPU_ATTENTION}  # points name the shape; sizes are looked up
    # (full sizes, reduced sizes) per case; --quick takes the first of the device's default
    attn = (list(attention.shapes.BENCH), list(CPU_ATTENTION))
    norm = (list(normalization.shapes.BENCH.values()), list(CPU_NORM.values()))
    glu_shapes = (list(glu.shapes.BENCH.values()), list(CPU_GLU.values()))
    loss_shapes = (list(loss.shapes.BENCH.values()), list(CPU_LOSS.values()))

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

    # name, shapes, inputs, Tokamax op (its implementation is the op's), torch baseline,
    # float64 reference, roofline measure (flops= or bytes=), tolerance scale
    cases = [
        (
            "attention",
            attn,
            attn_inputs,
            ("dot_product_attention", lambda q, k, v: tk.dot_product_attention(q, k, v, is_causal=True)),
            _sdpa,
            lambda q, k, v: attention.reference.dot_product_attention(q, k, v, is_causal=True),
            {"flops": attn_flops},
            lambda p: 4.0,
        ),
        (
            "rms_norm",
            norm,
            norm_inputs,
            ("layer_norm", lambda x, w: tk.rms_norm(x, w)),
            lambda x, w: F.rms_norm(x, (x.shape[-1],), w, 1e-6),
            lambda x, w: normalization.reference.rms_norm(x, w),
            {"bytes": norm_bytes},
            lambda p: 3.0,
        ),
        (
            "layer_norm",
            norm,
            norm_inputs,
            ("layer_norm", lambda x, w: tk.layer_norm(x, w)),
            lambda x, w: F.layer_norm(x, (x.shape[-1],), w, None, 1e-6),
            lambda x, w: normalization.reference.layer_norm(x, w),
            {"bytes": norm_bytes},
            lambda p: 3.0,
        ),
        (
            "glu",
            glu_shapes,
            glu_inputs,
            ("gated_linear_unit", lambda x, w: tk.gated_linear_unit(x, w, activation="silu")),
            lambda x, w: F.silu(x @ w[:, 0]) * (x @ w[:, 1]),
            lambda x, w: glu.reference.gated_linear_unit(x, w, activation="silu"),
            {"flops": lambda p: 2 * 2 * p["shape"][0][0] * p["shape"][0][1] * p["shape"][1]},
            lambda p: 8.0,
        ),
        (
            "loss",
            loss_shapes,
            loss_inputs,
            (
                "linear_softmax_cross_entropy_loss",
                lambda x, y, w: tk.linear_softmax_cross_entropy_loss(x, y, w),
            ),
            lambda x, y, w: F.cross_entropy(x @ w, y, reduction="sum"),
            lambda x, y, w: loss.reference.linear_softmax_cross_entropy_loss(x, y, w),
            {"flops": lambda p: 2 * p["shape"][0] * p["shape"][1] * p["shape"][2]},
            # a sum of B per-row losses: the absolute tolerance grows with B
            lambda p: float(p["shape"][0]),
        ),
    ]
    covered = {impl_op for _, _, _, (impl_op, _), *_ in cases}
    formulas, formula_ops = _formula_benchmarks(quick, device_type)
    return [
        bench.Benchmark(
            name=f"tokamax_{name}",
            points=bench.grid(shape=sizes[0], dtype=dtypes),
            reduced_points=bench.grid(shape=sizes[1], dtype=dtypes),
            quick_points=bench.grid(shape=sizes[1 if cpu else 0][:1], dtype=dtypes),
            inputs=inputs,
            candidates=_candidates(impl_op, ours, torch_fn, device_type, quick),
            reference=reference,
            tolerance_scale=tolerance_scale,
            **measure,
        )
        for name, sizes, inputs, (impl_op, ours), torch_fn, reference, measure, tolerance_scale in cases
    ] + formulas, covered | formula_ops


def benchmarks(quick: bool, device_type: str) -> list[bench.Benchmark]:
    """Every op of every registered Tokamax family: the cases above where one is written,
    and the others on their small example calls, so a new family is benchmarked unedited."""
    written, covered = _written_benchmarks(quick, device_type)
    rest = [
        example_benchmark(family, op, device_type, quick)
        for family in FAMILIES.values()
        for op in family.ops
        if op.short_name not in covered
    ]
    return written + rest


def _by_name(op, fn):
    """`fn` (a family reference, named and keyworded as the op's public function) called with
    the op's arguments by name, as checked mode calls it."""
    accepted = inspect.signature(fn).parameters
    names = [p.name for p in op.signature.params]

    def call(*args, **kwargs):
        values = op.signature.bind(args, kwargs)
        return fn(**{n: v for n, v in zip(names, values) if n in accepted})

    return call


def example_benchmark(family, op, device_type: str, quick: bool) -> bench.Benchmark:
    """`op` on the first of its family's small example calls (`examples.<op>_small`, valid
    values), beside its family's torch reference, which is also the float64 reference."""
    [(args, kwargs), *_] = op.sharding_examples()
    floats = [a.dtype for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()]
    reference = _by_name(op, getattr(family.reference, op.short_name))
    # the implementation table it resolves through: its own, or its family's (ragged_dot_general
    # runs on ragged_dot's)
    tables = [t.op for t in family.implementations]
    table = op.short_name if op.short_name in tables else tables[0]
    return bench.Benchmark(
        name=f"tokamax_{op.short_name}",
        points=[{"dtype": floats[0] if floats else torch.float32}],
        inputs=lambda p, dev: tuple(a.to(dev) if isinstance(a, torch.Tensor) else a for a in args),
        candidates=_candidates(
            table,
            lambda *a: op(*a, **kwargs),
            lambda *a: reference(*a, **kwargs),
            device_type,
            quick or op.short_name in NOT_COMPILED,
        ),
        reference=lambda *a: reference(*a, **kwargs),
    )
