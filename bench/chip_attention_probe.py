"""Why the flash-attention template's forward trails JAX's flash attention inside a decoder layer
on a TPU v5e: a probe, JAX alone.

bench/reports/chip_v5e_layer_pieces.json (bench/chip_layer_pieces_probe.py) has the template's
forward at about 0.6x of JAX's Pallas flash attention (512-blocks) at the drawn layers' shapes
([1, heads, T, 128], causal, bf16), where its forward + backward runs 0.95-1.2x. Variants of the
forward kernel, each timed against JAX's kernel at the same blocks:

  rows      the template as shipped: the running max m and sum l in (block_q, 1) VMEM scratch
  dense     m and l held lane-dense, (block_q, 128), as JAX's kernel holds them: the per-step
            broadcasts against the (block_q, block_k) scores are tiles of whole vregs
  diagonal  dense, and the causal mask built only on the blocks that cross the diagonal (the
            others take the scores as they are)

each at blocks (block_q, block_k) of 512 x 512, 1024 x 512, 512 x 1024, 1024 x 1024, where they
divide the sequence. The error is normwise against the template as shipped.

`--only backward`: the same question of the backward kernels, which read the forward's lse and
delta = rowsum(d_out * out) as (block_q, 1) blocks and broadcast them against each step's
(block_q, block_k) probabilities. Forward + backward (jax.vjp, the template's forward) at 512
x 512, with the backward as shipped (`rows`), with dQ's kernel holding lse and delta lane-dense
in scratch for its q block (`dense_dq`), and with dK/dV's kernel also reading them lane-dense,
[b, h, seq, 128] (`dense_both`: as JAX's kernel reads l, m and di); against JAX's flash
attention forward + backward at the same blocks. The gradients' error is normwise against the
shipped backward's and JAX's.

    python3 bench/chip_attention_probe.py [--only forward,backward] [--shapes H,T,D;...] [--out FILE]
        [--quick --interpret]
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tpu_kernels.chip import load, measure, probes  # noqa: E402

SECTIONS = {"forward": "the forward kernel three ways", "backward": "the backward kernels three ways"}
BACKWARD_SHAPES = [(64, 1536, 128), (12, 2560, 128), (8, 8192, 128)]
SHAPES = [(64, 1536, 128), (12, 2560, 128), (8, 8192, 128), (16, 4096, 256), (32, 2048, 64)]
"""(heads, tokens, head_dim): the drawn record's three layers, then longer, wider and narrower heads."""
BLOCKS = [(512, 512), (1024, 512), (512, 1024), (1024, 1024)]
VARIANTS = ("rows", "dense", "diagonal")
LANES = 128


def _tile(x, n: int):
    """(rows, 128) lane-replicated -> (rows, n): whole vregs repeated, or the first n lanes."""
    if n <= LANES:
        return x[:, :n]
    return jnp.tile(x, (1, n // LANES))


def _fwd_kernel(q_ref, k_ref, v_ref, o_ref, lse_ref, m_sc, l_sc, acc_sc, *, sm_scale, variant):
    block_q, block_k = q_ref.shape[0], k_ref.shape[0]
    d = q_ref.shape[1]
    i, j = pl.program_id(2), pl.program_id(3)
    q_start, k_start = i * block_q, j * block_k
    lanes = m_sc.shape[1]

    @pl.when(j == 0)
    def _init():
        m_sc[...] = jnp.full_like(m_sc, -jnp.inf)
        l_sc[...] = jnp.zeros_like(l_sc)
        acc_sc[...] = jnp.zeros_like(acc_sc)

    def step(masked: bool):
        s = jax.lax.dot_general(q_ref[...], k_ref[...], (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
        s = s * sm_scale
        if masked:
            rows = q_start + jax.lax.broadcasted_iota(jnp.int32, s.shape, 0)
            cols = k_start + jax.lax.broadcasted_iota(jnp.int32, s.shape, 1)
            s = jnp.where(cols <= rows, s, -0.7 * float(jnp.finfo(jnp.float32).max))
        m_prev = m_sc[...]
        m_new = jnp.maximum(m_prev, jnp.max(s, axis=-1, keepdims=True))
        rescale = jnp.exp(m_prev - m_new)
        if lanes == 1:
            p = jnp.exp(s - m_new)
            l_sc[...] = rescale * l_sc[...] + jnp.sum(p, axis=-1, keepdims=True)
            acc_rescale = rescale
        else:
            p = jnp.exp(s - _tile(m_new, block_k))
            l_sc[...] = rescale * l_sc[...] + jnp.sum(p, axis=-1, keepdims=True)
            acc_rescale = _tile(rescale, d)
        v = v_ref[...]
        pv = jnp.dot(p.astype(v.dtype), v, preferred_element_type=jnp.float32)
        acc_sc[...] = acc_rescale * acc_sc[...] + pv
        m_sc[...] = m_new

    needed = k_start <= q_start + block_q - 1
    if variant == "diagonal":
        crosses = k_start + block_k - 1 > q_start

        @pl.when(jnp.logical_and(needed, crosses))
        def _diag():
            step(True)

        @pl.when(jnp.logical_not(crosses))
        def _below():
            step(False)

    else:

        @pl.when(needed)
        def _step():
            step(True)

    @pl.when(j == pl.num_programs(3) - 1)
    def _finish():
        total = l_sc[...]
        if lanes == 1:
            o_ref[...] = (acc_sc[...] / total).astype(o_ref.dtype)
            lse_ref[...] = m_sc[...] + jnp.log(total)
        else:
            o_ref[...] = (acc_sc[...] / _tile(total, d)).astype(o_ref.dtype)
            lse_ref[...] = (m_sc[...] + jnp.log(total))[:, :1]


def flash_forward(q, k, v, *, block_q: int, block_k: int, variant: str):
    """Causal attention forward -> (out, lse [b, h, sq, 1])."""
    fa = load.template("flash_attention")
    b, h, sq, d = q.shape
    sk = k.shape[2]
    q_spec, kv_spec, row_spec = fa._specs(block_q, block_k, d, True, kv_inner=True)
    lanes = 1 if variant == "rows" else LANES
    return pl.pallas_call(
        functools.partial(_fwd_kernel, sm_scale=1.0 / np.sqrt(d), variant=variant),
        out_shape=(jax.ShapeDtypeStruct(q.shape, q.dtype), jax.ShapeDtypeStruct((b, h, sq, 1), jnp.float32)),
        grid=(b, h, sq // block_q, sk // block_k),
        in_specs=[q_spec, kv_spec, kv_spec],
        out_specs=(q_spec, row_spec),
        scratch_shapes=[pltpu.VMEM((block_q, lanes), jnp.float32), pltpu.VMEM((block_q, lanes), jnp.float32),
                        pltpu.VMEM((block_q, d), jnp.float32)],
        compiler_params=fa._params(block_q, block_k, d, q.dtype.itemsize),
    )(q, k, v)


def _dkv_kernel(q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, dk_ref, dv_ref, dk_sc, dv_sc, *, sm_scale):
    """The template's dK/dV kernel (causal); lse and delta as given: (block_q, 1) or lane-dense."""
    block_k, block_q = k_ref.shape[0], q_ref.shape[0]
    j, i = pl.program_id(2), pl.program_id(3)
    q_start, k_start = i * block_q, j * block_k
    dense = lse_ref.shape[1] == LANES

    @pl.when(i == 0)
    def _init():
        dk_sc[...] = jnp.zeros_like(dk_sc)
        dv_sc[...] = jnp.zeros_like(dv_sc)

    @pl.when(k_start <= q_start + block_q - 1)
    def _step():
        fa = load.template("flash_attention")
        q, k, v, do = q_ref[...], k_ref[...], v_ref[...], do_ref[...]
        s = fa._scores(q, k, sm_scale, True, q_start, k_start)
        lse, delta = lse_ref[...], delta_ref[...]
        if dense:
            lse, delta = _tile(lse, block_k), _tile(delta, block_k)
        p = jnp.exp(s - lse)
        t = (((0,), (0,)), ((), ()))
        dv_sc[...] += jax.lax.dot_general(p.astype(do.dtype), do, t, preferred_element_type=jnp.float32)
        dp = jax.lax.dot_general(do, v, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
        ds = p * (dp - delta)
        dk_sc[...] += jax.lax.dot_general(ds.astype(q.dtype), q, t, preferred_element_type=jnp.float32)

    @pl.when(i == pl.num_programs(3) - 1)
    def _finish():
        dk_ref[...] = (dk_sc[...] * sm_scale).astype(dk_ref.dtype)
        dv_ref[...] = dv_sc[...].astype(dv_ref.dtype)


def _dq_kernel(q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, dq_ref, dq_sc, *rows_sc, sm_scale):
    """The template's dQ kernel (causal); with `rows_sc` (two (block_q, 128) buffers) lse and
    delta are made lane-dense once per q block and read so at every kv step."""
    block_q, block_k = q_ref.shape[0], k_ref.shape[0]
    i, j = pl.program_id(2), pl.program_id(3)
    q_start, k_start = i * block_q, j * block_k

    @pl.when(j == 0)
    def _init():
        dq_sc[...] = jnp.zeros_like(dq_sc)
        if rows_sc:
            rows_sc[0][...] = jnp.broadcast_to(lse_ref[...], rows_sc[0].shape)
            rows_sc[1][...] = jnp.broadcast_to(delta_ref[...], rows_sc[1].shape)

    @pl.when(k_start <= q_start + block_q - 1)
    def _step():
        fa = load.template("flash_attention")
        q, k, v, do = q_ref[...], k_ref[...], v_ref[...], do_ref[...]
        s = fa._scores(q, k, sm_scale, True, q_start, k_start)
        if rows_sc:
            lse, delta = _tile(rows_sc[0][...], block_k), _tile(rows_sc[1][...], block_k)
        else:
            lse, delta = lse_ref[...], delta_ref[...]
        p = jnp.exp(s - lse)
        dp = jax.lax.dot_general(do, v, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
        ds = p * (dp - delta)
        dq_sc[...] += jnp.dot(ds.astype(k.dtype), k, preferred_element_type=jnp.float32)

    @pl.when(j == pl.num_programs(3) - 1)
    def _finish():
        dq_ref[...] = (dq_sc[...] * sm_scale).astype(dq_ref.dtype)


def flash_backward(q, k, v, out, lse, do, *, block_q: int, block_k: int, variant: str):
    """(dq, dk, dv) of causal attention: the template's two backward kernels, `variant` as in
    the module docstring. lse: the forward's, [b, h, sq]."""
    fa = load.template("flash_attention")
    b, h, sq, d = q.shape
    sk = k.shape[2]
    scale = 1.0 / np.sqrt(d)
    delta = jnp.sum(do.astype(jnp.float32) * out.astype(jnp.float32), axis=-1, keepdims=True)
    lse = lse[..., None]
    nq, nk = sq // block_q, sk // block_k
    params = fa._params(block_q, block_k, d, q.dtype.itemsize)
    q_spec, kv_spec, row_spec = fa._specs(block_q, block_k, d, True, kv_inner=False)
    rows_kv = (lse, delta)
    if variant == "dense_both":
        rows_kv = tuple(jnp.broadcast_to(r, (b, h, sq, LANES)) for r in rows_kv)
        row_spec = pl.BlockSpec((None, None, block_q, LANES), row_spec.index_map)
    dk, dv = pl.pallas_call(
        functools.partial(_dkv_kernel, sm_scale=scale),
        out_shape=(jax.ShapeDtypeStruct(k.shape, k.dtype), jax.ShapeDtypeStruct(v.shape, v.dtype)),
        grid=(b, h, nk, nq),
        in_specs=[q_spec, kv_spec, kv_spec, q_spec, row_spec, row_spec],
        out_specs=(kv_spec, kv_spec),
        scratch_shapes=[pltpu.VMEM((block_k, d), jnp.float32), pltpu.VMEM((block_k, d), jnp.float32)],
        compiler_params=params,
    )(q, k, v, do, *rows_kv)
    q_spec, kv_spec, row_spec = fa._specs(block_q, block_k, d, True, kv_inner=True)
    extra = [] if variant == "rows" else [pltpu.VMEM((block_q, LANES), jnp.float32)] * 2
    dq = pl.pallas_call(
        functools.partial(_dq_kernel, sm_scale=scale),
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid=(b, h, nq, nk),
        in_specs=[q_spec, kv_spec, kv_spec, q_spec, row_spec, row_spec],
        out_specs=q_spec,
        scratch_shapes=[pltpu.VMEM((block_q, d), jnp.float32), *extra],
        compiler_params=params,
    )(q, k, v, do, lse, delta)
    return dq, dk, dv


def with_backward(variant: str, block_q: int, block_k: int):
    """Causal attention whose vjp runs the template's forward and `flash_backward(variant)`."""
    fa = load.template("flash_attention")

    @jax.custom_vjp
    def attention(q, k, v):
        return fa.flash_attention(q, k, v, causal=True, block_q=block_q, block_k=block_k)[0]

    def fwd(q, k, v):
        out, lse = fa.flash_attention(q, k, v, causal=True, block_q=block_q, block_k=block_k)
        return out, (q, k, v, out, lse)

    def bwd(res, g):
        return flash_backward(*res, g, block_q=block_q, block_k=block_k, variant=variant)

    attention.defvjp(fwd, bwd)
    return attention


def _fwd_bwd(fn, cot):
    def run(q, k, v):
        _, vjp = jax.vjp(fn, q, k, v)
        return vjp(cot)

    return run


def jax_flash(q, k, v, *, block_q: int, block_k: int):
    from jax.experimental.pallas.ops.tpu import flash_attention as jfa

    sizes = jfa.BlockSizes(block_q=block_q, block_k_major=block_k, block_k=block_k, block_b=1,
                           block_q_major_dkv=block_q, block_k_major_dkv=block_k, block_k_dkv=block_k,
                           block_q_dkv=block_q, block_k_major_dq=block_k, block_k_dq=block_k, block_q_dq=block_q)
    return jfa.flash_attention(q, k, v, causal=True, sm_scale=1.0 / np.sqrt(q.shape[-1]), block_sizes=sizes)


def _time(fn, args, rounds: int) -> dict:
    compiled, _, error = measure.compile_fn(fn, args)
    if error is not None:
        return {"error": error}
    try:
        out = compiled(*args)
        return {"us": round(measure.timed(compiled, args, rounds=rounds, round_s=0.15) * 1e6, 1), "out": out}
    except Exception as e:  # a runtime failure is a verdict too
        return {"error": measure.error_text(e)}


def forward(shapes, blocks, rounds: int, write) -> None:
    fa = load.template("flash_attention")
    rng = np.random.default_rng(0)
    for heads, tokens, d in shapes:
        q, k, v = (jax.device_put(rng.standard_normal((1, heads, tokens, d), dtype=np.float32).astype(jnp.bfloat16))
                   for _ in range(3))
        shipped = _time(lambda q, k, v: fa.flash_attention(q, k, v, causal=True)[0], (q, k, v), rounds)
        ref = np.asarray(shipped["out"], np.float32) if "out" in shipped else None
        write({"shape": [1, heads, tokens, d], "kernel": "shipped", "us": shipped.get("us"),
               "error": shipped.get("error")})
        for bq, bk in blocks:
            if tokens % bq or tokens % bk:
                continue
            theirs = _time(functools.partial(jax_flash, block_q=bq, block_k=bk), (q, k, v), rounds)
            write({"shape": [1, heads, tokens, d], "kernel": "jax_flash", "blocks": [bq, bk],
                   "us": theirs.get("us"), "error": theirs.get("error")})
            for variant in VARIANTS:
                ours = _time(lambda q, k, v, bq=bq, bk=bk, variant=variant:
                             flash_forward(q, k, v, block_q=bq, block_k=bk, variant=variant)[0], (q, k, v), rounds)
                row = {"shape": [1, heads, tokens, d], "kernel": variant, "blocks": [bq, bk],
                       "us": ours.get("us"), "error": ours.get("error")}
                if ours.get("us") and theirs.get("us"):
                    row["speed_vs_jax_flash"] = round(theirs["us"] / ours["us"], 3)
                if ref is not None and "out" in ours:
                    got = np.asarray(ours["out"], np.float32)
                    row["normwise_vs_shipped"] = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
                write(row)


def backward(shapes, block: int, rounds: int, write) -> None:
    rng = np.random.default_rng(1)
    for heads, tokens, d in shapes:
        bq = bk = min(block, tokens)
        q, k, v, cot = (jax.device_put(rng.standard_normal((1, heads, tokens, d), dtype=np.float32)
                                       .astype(jnp.bfloat16)) for _ in range(4))
        theirs = _time(_fwd_bwd(functools.partial(jax_flash, block_q=bq, block_k=bk), cot), (q, k, v), rounds)
        write({"section": "backward", "shape": [1, heads, tokens, d], "kernel": "jax_flash", "blocks": [bq, bk],
               "us": theirs.get("us"), "error": theirs.get("error")})
        ref = None
        for variant in ("rows", "dense_dq", "dense_both"):
            ours = _time(_fwd_bwd(with_backward(variant, bq, bk), cot), (q, k, v), rounds)
            row = {"section": "backward", "shape": [1, heads, tokens, d], "kernel": variant, "blocks": [bq, bk],
                   "us": ours.get("us"), "error": ours.get("error")}
            if ours.get("us") and theirs.get("us"):
                row["speed_vs_jax_flash"] = round(theirs["us"] / ours["us"], 3)
            if "out" in ours:
                grads = [np.asarray(g, np.float32) for g in ours["out"]]
                if ref is None:
                    ref = grads
                row["normwise_vs_rows"] = max(float(np.linalg.norm(a - b) / np.linalg.norm(b)) for a, b in zip(grads, ref))
                if "out" in theirs:  # JAX's kernel: another summation order, in bf16
                    row["normwise_vs_jax_flash"] = max(float(np.linalg.norm(a - np.asarray(b, np.float32))
                                                             / np.linalg.norm(np.asarray(b, np.float32)))
                                                       for a, b in zip(grads, theirs["out"]))
            write(row)


def main(argv=None) -> None:
    ap = probes.arguments(__doc__, "attention_probe.jsonl", SECTIONS)
    ap.add_argument("--shapes", default="", help="heads,tokens,head_dim;... (default: SHAPES, BACKWARD_SHAPES)")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    if args.interpret:
        probes.use_interpreter()
    given = [tuple(int(x) for x in s.split(",")) for s in args.shapes.split(";")] if args.shapes else None
    only = set(args.only.split(","))
    with probes.lines(args.out, shown=300) as write:
        write({"section": "meta", "device": str(jax.devices()[0].device_kind), "jax": jax.__version__})
        if "forward" in only:
            if args.quick:
                forward([(2, 256, 128)], [(128, 128), (256, 128)], args.rounds, write)
            else:
                forward(given or SHAPES, BLOCKS, args.rounds, write)
        if "backward" in only:
            if args.quick:
                backward([(2, 256, 128)], 128, args.rounds, write)
            else:
                backward(given or BACKWARD_SHAPES, 512, args.rounds, write)


if __name__ == "__main__":
    main()
