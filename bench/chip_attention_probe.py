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

    python3 bench/chip_attention_probe.py [--shapes H,T,D;...] [--out FILE] [--quick --interpret]
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


def main(argv=None) -> None:
    ap = probes.arguments(__doc__, "attention_probe.jsonl")
    ap.add_argument("--shapes", default="", help="heads,tokens,head_dim;... (default: SHAPES)")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    if args.interpret:
        probes.use_interpreter()
    shapes = [tuple(int(x) for x in s.split(",")) for s in args.shapes.split(";")] if args.shapes else SHAPES
    blocks = BLOCKS
    if args.quick:
        shapes, blocks = [(2, 256, 128)], [(128, 128), (256, 128)]
    fa = load.template("flash_attention")
    rng = np.random.default_rng(0)
    with probes.lines(args.out, shown=300) as write:
        write({"section": "meta", "device": str(jax.devices()[0].device_kind), "jax": jax.__version__})
        for heads, tokens, d in shapes:
            q, k, v = (jax.device_put(rng.standard_normal((1, heads, tokens, d), dtype=np.float32).astype(jnp.bfloat16))
                       for _ in range(3))
            shipped = _time(lambda q, k, v: fa.flash_attention(q, k, v, causal=True)[0], (q, k, v), args.rounds)
            ref = np.asarray(shipped["out"], np.float32) if "out" in shipped else None
            write({"shape": [1, heads, tokens, d], "kernel": "shipped", "us": shipped.get("us"),
                   "error": shipped.get("error")})
            for bq, bk in blocks:
                if tokens % bq or tokens % bk:
                    continue
                theirs = _time(functools.partial(jax_flash, block_q=bq, block_k=bk), (q, k, v), args.rounds)
                write({"shape": [1, heads, tokens, d], "kernel": "jax_flash", "blocks": [bq, bk],
                       "us": theirs.get("us"), "error": theirs.get("error")})
                for variant in VARIANTS:
                    ours = _time(lambda q, k, v, bq=bq, bk=bk, variant=variant:
                                 flash_forward(q, k, v, block_q=bq, block_k=bk, variant=variant)[0], (q, k, v),
                                 args.rounds)
                    row = {"shape": [1, heads, tokens, d], "kernel": variant, "blocks": [bq, bk],
                           "us": ours.get("us"), "error": ours.get("error")}
                    if ours.get("us") and theirs.get("us"):
                        row["speed_vs_jax_flash"] = round(theirs["us"] / ours["us"], 3)
                    if ref is not None and "out" in ours:
                        got = np.asarray(ours["out"], np.float32)
                        row["normwise_vs_shipped"] = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
                    write(row)


if __name__ == "__main__":
    main()
