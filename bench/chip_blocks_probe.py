"""Blocks the defaults do not try, and a gate that overlaps the MXU: a probe, JAX alone.

Two questions the drawn record (bench/reports/chip_v5e_drawn.json) leaves open:

  template   The flash-attention template's float32 forward runs at 0.87x JAX's flash attention
             at [1, 8, 3584, 128], both at 512-blocks: its defaults are powers of two (1024, 512,
             256, 128) and 3584 = 7 x 512. This times the template at every pair of blocks that
             are multiples of 128 and divide the sequence (896 and 1792 among them), forward and
             forward + backward, beside JAX's flash attention at 512-blocks; and the attention
             family (by token, as the chip layer calls it) at its default and at such blocks.
  gated      matmul's gated down projection (kernels/matmul/gated.py) makes silu(g) * u in VMEM
             before each step's dot, and the vector work runs beside no MXU work: at qwen2.5-1.5b's
             [2560, 8960] x [8960, 1536] it took 453 us where matmul alone on h took 385. This
             times the kernel at its default blocks and at wider ones, and two variants of its
             step that give the scheduler independent work to interleave: the gate made and
             multiplied in `chunk`-wide slices of the contraction (`k_chunk`), or in slices of
             rows (`m_chunk`), each slice's dot independent of the next slice's gate.

Each group's sides are timed interleaved (measure.time_interleaved), n calls then one wait, min of
`--rounds`. Outputs are checked against the group's first side (normwise). JSON lines to
$OUT/blocks_probe.jsonl (or --out).

    python3 bench/chip_blocks_probe.py [--only template,gated] [--out FILE] [--quick --interpret]
"""

from __future__ import annotations

import functools
import itertools
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tpu_kernels import wiring  # noqa: E402
from tpu_kernels.chip import load, measure, point, probes  # noqa: E402

SECTIONS = {"template": "attention at blocks that divide the sequence", "gated": "the gate's overlap with the MXU"}

TEMPLATE_SHAPES = [  # (batch, heads, seq, head_dim, dtype, with backward)
    (1, 8, 3584, 128, "f32", True),
    (1, 8, 3584, 128, "bf16", True),
    (1, 8, 1280, 64, "bf16", True),
    (1, 12, 2560, 128, "bf16", True),
]
GATED_SHAPES = [(2560, 8960, 1536), (2560, 11008, 4096)]  # [T, ffn] x [ffn, d]: qwen2.5-1.5b, llama-2-7b


def _blocks_of(seq: int, low: int = 256) -> list[int]:
    """Multiples of 128 from `low` that divide `seq`, and `seq` itself (capped at 2048)."""
    return [b for b in range(low, min(seq, 2048) + 1, 128) if seq % b == 0]


def _time_group(sides: dict, args, rounds: int, write, base: dict) -> None:
    compiled, errors = {}, {}
    for name, fn in sides.items():
        c, _, error = measure.compile_fn(fn, args)
        if error is None:
            compiled[name] = c
        else:
            errors[name] = error
    ref = None
    outs = {}
    for name, c in compiled.items():
        try:
            outs[name] = jax.device_get(c(*args))
            ref = outs[name] if ref is None else ref
        except Exception as e:  # a runtime failure is a verdict too
            errors[name] = measure.error_text(e)
    times = measure.time_interleaved({n: compiled[n] for n in outs}, args, rounds=rounds, round_s=0.15)
    for name in sides:
        row = dict(base, side=name)
        if name in errors:
            row["error"] = errors[name][:300]
        else:
            t = times[name]
            if isinstance(t, Exception):
                row["error"] = measure.error_text(t)[:300]
            else:
                row["us"] = round(float(t) * 1e6, 1)
                row["spread"] = None if t.spread is None else round(t.spread, 4)
                leaves = zip(jax.tree_util.tree_leaves(outs[name]), jax.tree_util.tree_leaves(ref))
                row["err_vs_first"] = max(measure.normwise(a, b) for a, b in leaves)
        write(row)


def template(rounds: int, write, quick: bool) -> None:
    fa = load.template("flash_attention")
    fam = load.family("attention").pallas
    rng = np.random.default_rng(0)
    shapes = [(1, 2, 512, 128, "f32", True)] if quick else TEMPLATE_SHAPES
    for b, h, s, d, dt, backward in shapes:
        dtype = jnp.float32 if dt == "f32" else jnp.bfloat16
        q, k, v, do = (jax.device_put(rng.standard_normal((b, h, s, d), dtype=np.float32).astype(dtype))
                       for _ in range(4))
        scale = 1.0 / np.sqrt(d)
        sizes = [x for x in _blocks_of(s) if x >= 512 or s <= 1280]
        modes = ("fwd", "fwd_bwd") if backward else ("fwd",)
        for mode in modes:
            sides = {}
            flash = point.jax_flash(True, scale)
            if s % 512 == 0:
                sides["jax_flash_512"] = flash
            for bq, bk in itertools.product(sizes, sizes):
                sides[f"template_{bq}x{bk}"] = functools.partial(
                    lambda q, k, v, bq, bk: fa.flash_attention(q, k, v, causal=True, block_q=bq, block_k=bk)[0],
                    bq=bq, bk=bk)
            if d % 128 == 0:
                for blk in [None, *sizes]:
                    sides[f"family_by_token_{blk or 'default'}"] = functools.partial(
                        lambda q, k, v, blk: _swap(fam.attention_out_by_token(
                            _swap(q), _swap(k), _swap(v), causal=True, block_q=blk, block_k=blk)), blk=blk)
            if mode == "fwd_bwd":
                sides = {"jax_flash_512": _grad(flash, do)} if "jax_flash_512" in sides else {}
                for bq, bk in itertools.product(sizes, sizes):
                    sides[f"template_{bq}x{bk}"] = functools.partial(_template_grads, fa, do=do, bq=bq, bk=bk)
                sides.update(_family_grads(fam, sizes, do) if d % 128 == 0 else {})
            _time_group(sides, (q, k, v), rounds, write,
                        {"section": "template", "shape": [b, h, s, d], "dtype": dt, "mode": mode})


def _swap(a):
    """[b, h, s, d] <-> [b, s, h, d]: the family's by-token layout."""
    return jnp.swapaxes(a, 1, 2)


def _grad(f, do):
    def run(q, k, v):
        return jax.vjp(f, q, k, v)[1](do)

    return run


def _template_grads(fa, q, k, v, *, do, bq: int, bk: int):
    out, lse = fa.flash_attention(q, k, v, causal=True, block_q=bq, block_k=bk)
    return fa.flash_attention_backward(q, k, v, out, lse, do, causal=True, block_q=bq, block_k=bk)


def _family_grads(fam, sizes, do):
    """The family's forward + backward by token, as the chip layer's custom_vjp runs it."""
    t = _swap
    out = {}
    for blk in [None, *sizes]:
        kw = dict(causal=True, block_q=blk, block_k=blk)

        def run(q, k, v, kw=kw):
            q, k, v, g = t(q), t(k), t(v), t(do)
            o, lse = fam.attention_by_token(q, k, v, **kw)
            return tuple(t(x) for x in fam.attention_backward_by_token(q, k, v, o, lse, g, **kw))

        out[f"family_by_token_{blk or 'default'}"] = run
    return out


# ------------------------------------------------------------------ the gate's overlap


def _chunked_kernel(g_ref, u_ref, w_ref, o_ref, *scratch, n_k: int, k_chunk: int, m_chunk: int):
    """gated._forward_kernel with its step in slices: `k_chunk` columns of the a tile (and rows
    of w) at a time, or `m_chunk` rows; each slice's gate independent of the previous slice's dot.
    The contraction must divide into whole blocks (no K tail)."""
    gated = wiring.registered("tpu_kernels.kernels.matmul.gated")
    acc_ref = scratch[0] if scratch else o_ref
    kk = pl.program_id(2)
    bm, bk = g_ref.shape

    @pl.when(kk == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    if k_chunk:
        part = None
        for c in range(0, bk, k_chunk):
            a = gated._gate(g_ref[:, c:c + k_chunk], u_ref[:, c:c + k_chunk])
            p = jnp.dot(a, w_ref[c:c + k_chunk, :], preferred_element_type=jnp.float32)
            part = p if part is None else part + p
        acc_ref[...] += part
    else:
        for r in range(0, bm, m_chunk):
            a = gated._gate(g_ref[r:r + m_chunk, :], u_ref[r:r + m_chunk, :])
            acc_ref[r:r + m_chunk, :] += jnp.dot(a, w_ref[...], preferred_element_type=jnp.float32)

    if scratch:

        @pl.when(kk == n_k - 1)
        def _write():
            o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def chunked(g, u, w, *, bm: int, bn: int, bk: int, k_chunk: int = 0, m_chunk: int = 0):
    gated = wiring.registered("tpu_kernels.kernels.matmul.gated")
    (m, k), n = g.shape, w.shape[1]
    if k % bk:
        raise ValueError(f"chunked: block_k {bk} must divide K {k}")
    grid = (pl.cdiv(m, bm), pl.cdiv(n, bn), k // bk)
    a_spec = pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk))
    need = gated._prologue_need(bm, bn, bk, g.dtype.itemsize)
    return pl.pallas_call(
        functools.partial(_chunked_kernel, n_k=grid[2], k_chunk=k_chunk, m_chunk=m_chunk),
        out_shape=jax.ShapeDtypeStruct((m, n), g.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=0, grid=grid,
            in_specs=[a_spec, a_spec, pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j))],
            out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
            scratch_shapes=gated._acc_scratch(g.dtype, bm, bn),
        ),
        compiler_params=gated._params(need),
    )(g, u, w)


def gated_section(rounds: int, write, quick: bool) -> None:
    mm = load.family("matmul")
    gated = wiring.registered("tpu_kernels.kernels.matmul.gated")
    rng = np.random.default_rng(1)
    shapes = [(256, 1024, 256)] if quick else GATED_SHAPES
    for t, f, d in shapes:
        def bf(shape, scale=1.0):
            return jax.device_put((rng.standard_normal(shape, dtype=np.float32) * scale).astype(jnp.bfloat16))

        g, u, w = bf((t, f)), bf((t, f)), bf((f, d), f**-0.5)
        b = mm.pallas.blocks.choose(t, f, d, 2, 1, gated._prologue_need, gated.GATE)
        sides = {
            "xla": lambda g, u, w: jnp.dot(jax.nn.silu(g) * u, w, preferred_element_type=jnp.float32).astype(g.dtype),
            "floor": lambda g, u, w: mm.pallas.matmul(g, w),
            f"gated_default_{b.m}x{b.n}x{b.k}": lambda g, u, w: gated.swiglu_matmul(g, u, w),
        }
        tried = {(b.m, b.n, b.k)}
        for bm, bn, bk in [(b.m, d, b.k), (256, d, b.k), (b.m, d, b.k // 2), (1280, d, 896), (512, d, 896),
                           (1024, d, 512), (512, d, 1792)]:
            bm, bn, bk = min(bm, t), min(bn, d), min(bk, f)
            if (bm, bn, bk) in tried or f % bk:
                continue
            tried.add((bm, bn, bk))
            sides[f"gated_{bm}x{bn}x{bk}"] = functools.partial(
                lambda g, u, w, bm, bn, bk: gated.swiglu_matmul(g, u, w, block_m=bm, block_n=bn, block_k=bk),
                bm=bm, bn=bn, bk=bk)
        for bm, bn, bk in sorted({(b.m, b.n, b.k), (b.m, d, b.k), (min(512, t), d, min(1792, f))}):
            if f % bk:
                continue
            for kc in (256, 512):
                if bk % kc == 0 and kc < bk:
                    sides[f"k_chunk{kc}_{bm}x{bn}x{bk}"] = functools.partial(chunked, bm=bm, bn=bn, bk=bk, k_chunk=kc)
            for mc in (128, 256):
                if bm % mc == 0 and mc < bm:
                    sides[f"m_chunk{mc}_{bm}x{bn}x{bk}"] = functools.partial(chunked, bm=bm, bn=bn, bk=bk, m_chunk=mc)
        _time_group(sides, (g, u, w), rounds, write, {"section": "gated", "dims": [t, f, d], "mode": "fwd"})


def main(argv=None) -> None:
    ap = probes.arguments(__doc__, "blocks_probe.jsonl", SECTIONS)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    if args.interpret:
        probes.use_interpreter()
    only = set(args.only.split(","))
    with probes.lines(args.out, shown=300) as write:
        write({"section": "meta", "device": str(jax.devices()[0].device_kind), "jax": jax.__version__})
        if "gated" in only:
            gated_section(args.rounds, write, args.quick)
        if "template" in only:
            template(args.rounds, write, args.quick)


if __name__ == "__main__":
    main()
