"""Where a decoder layer's gap to XLA comes from, piece by piece: a probe, JAX alone.

The drawn record (bench/reports/chip_v5e_drawn.json, `drawn_layer`) has the chip runner's layer
(tpu_kernels/chip/layer.py) behind the same layer from XLA's matmuls and rmsnorm and JAX's flash
attention, the narrower the model the further. This probe times each piece of that layer on
its own, ours against XLA's, at a layer's dims, forward and forward + backward, each as the
runner's layer calls it (`layer.pieces`: the `jax.custom_vjp` pieces, the gated down projection,
attention by token where head_dim allows):

  rmsnorm [T, d]; the matmuls h Wq ([T, d] x [d, d]) and h Wg ([T, d] x [d, ffn]); the down
  projection from g and u ([T, ffn] each; ours gated, XLA's silu(g) * u then its dot); causal
  attention from the projections [T, heads * head_dim] (ours read by token; XLA's side
  transposes to JAX's flash attention and back); and the whole layer. What the layer's time
  holds beyond its pieces (the residual adds, and what overlaps between calls) is its glue.

Pieces that appear several times in the layer (four [d, d] projections, two rmsnorms, two FFN
up matmuls) count once here: `layer_share` weights each by its count, so the shares say which
piece the layer's gap is in. For each matmul it also times the cost model's next-cheapest
default candidates (`blocks.choose`'s pool) forward, to see whether another block would do
better there.

Each time: n calls, one wait, the minimum of `--rounds` rounds (tpu_kernels.chip.measure). Writes
JSON lines to $OUT/layer_pieces_probe.jsonl (or --out).

    python3 bench/chip_layer_pieces_probe.py [--only pieces,blocks] [--dims T,d,heads,hd,ffn;...]
        [--out FILE] [--quick --interpret]
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tpu_kernels.chip import drawn, layer, load, measure, probes  # noqa: E402

SECTIONS = {"pieces": "each piece ours against XLA's", "blocks": "each matmul at the model's next candidates",
            "layouts": "attention by token and by head, at a few blocks, beside JAX's flash attention"}
SEED = 211739  # the drawn record's seed: its three layer configs
COUNTS = {"rmsnorm": 2, "proj": 4, "ffn_up": 2, "ffn_down": 1, "attention": 1}
"""How many times each piece runs in the layer (chip/layer.py)."""


def _dims(text: str | None, quick: bool) -> list[dict]:
    if quick:
        return [dict(tokens=256, d=256, heads=2, head_dim=128, ffn=512, model="quick")]
    if not text:
        return drawn.layers(SEED)
    out = []
    for part in text.split(";"):
        t, d, h, hd, f = (int(v) for v in part.split(","))
        out.append(dict(tokens=t, d=d, heads=h, head_dim=hd, ffn=f, model=f"T{t}_d{d}"))
    return out


def _bf16(rng: np.random.Generator, shape, scale: float = 1.0) -> jax.Array:
    return jax.device_put((rng.standard_normal(shape, dtype=np.float32) * scale).astype(jnp.bfloat16))


def _attention_pair(p: dict, xattn, t: int, h: int, hd: int):
    """(ours, XLA's) causal attention from the projections [t, h * hd], as the layer runs it."""

    def heads(a):  # [t, h * hd] -> [1, h, t, hd]
        return a.reshape(t, h, hd).transpose(1, 0, 2)[None]

    def back(o):  # [1, h, t, hd] -> [t, h * hd]
        return o[0].transpose(1, 0, 2).reshape(t, h * hd)

    def xla(q, k, v):
        return back(xattn(heads(q), heads(k), heads(v)))

    if p["attention_by_token"] is not None:

        def ours(q, k, v):
            return p["attention_by_token"](*(a.reshape(1, t, h, hd) for a in (q, k, v))).reshape(t, h * hd)

    else:

        def ours(q, k, v):
            return back(p["attention"](heads(q), heads(k), heads(v))[0])

    return ours, xla


def _pieces(dims: dict, rng: np.random.Generator) -> dict[str, tuple]:
    """name -> (ours, xla, args): each piece as the layer calls it (`layer.pieces`)."""
    t, d, f, h, hd = dims["tokens"], dims["d"], dims["ffn"], dims["heads"], dims["head_dim"]
    p = layer.pieces({}, hd)
    xmm, xrms, xattn = layer._xla_kernels()
    x, w = _bf16(rng, (t, d)), _bf16(rng, (d,))
    qkv = tuple(_bf16(rng, (t, h * hd)) for _ in range(3))
    return {
        "rmsnorm": (p["rmsnorm"], xrms, (x, w)),
        "proj": (p["matmul"], xmm, (x, _bf16(rng, (d, h * hd), d**-0.5))),
        "ffn_up": (p["matmul"], xmm, (x, _bf16(rng, (d, f), d**-0.5))),
        "ffn_down": (p["gated_down"], lambda g, u, wd: xmm(jax.nn.silu(g) * u, wd),
                     (_bf16(rng, (t, f)), _bf16(rng, (t, f)), _bf16(rng, (f, d), f**-0.5))),
        "attention": (*_attention_pair(p, xattn, t, h, hd), qkv),
    }


def _fwd_bwd(fn, cot):
    def run(*args):
        _, vjp = jax.vjp(fn, *args)
        return vjp(cot)

    return run


def _time(fn, args, rounds: int) -> dict:
    compiled, _, error = measure.compile_fn(fn, args)
    if error is not None:
        return {"error": error}
    try:
        return {"us": round(measure.timed(compiled, args, rounds=rounds, round_s=0.15) * 1e6, 1)}
    except Exception as e:  # a runtime failure is a verdict too
        return {"error": measure.error_text(e)}


def pieces(dims: dict, rounds: int, write) -> None:
    rng = np.random.default_rng(0)
    found = {}
    for name, (ours, xla, args) in _pieces(dims, rng).items():
        for mode in ("fwd", "fwd_bwd"):
            if mode == "fwd":
                fo, fx = ours, xla
            else:
                cot = _bf16(rng, jax.eval_shape(xla, *args).shape)
                fo, fx = _fwd_bwd(ours, cot), _fwd_bwd(xla, cot)
            a, b = _time(fo, args, rounds), _time(fx, args, rounds)
            row = {"section": "pieces", "model": dims["model"], "dims": dims, "piece": name, "mode": mode,
                   "count": COUNTS[name], "ours_us": a.get("us"), "xla_us": b.get("us")}
            row.update({f"{k}_error": v["error"] for k, v in (("ours", a), ("xla", b)) if "error" in v})
            if a.get("us") and b.get("us"):
                row["speed_vs_xla"] = round(b["us"] / a["us"], 3)
                row["gap_us_in_layer"] = round((a["us"] - b["us"]) * COUNTS[name], 1)
                found[(name, mode)] = row
            write(row)
    whole_args = layer._inputs({k: dims[k] for k in ("tokens", "d", "heads", "head_dim", "ffn")}, rng)
    whole_args = [jax.device_put(v) for v in whole_args]
    ours_l = layer.own_layer(layer.pieces({}, dims["head_dim"]), dims["heads"], dims["head_dim"])
    xla_l = layer.xla_layer(dims["heads"], dims["head_dim"])
    cot = _bf16(rng, whole_args[0].shape)
    for mode, (fo, fx) in (("fwd", (ours_l, xla_l)), ("fwd_bwd", (_fwd_bwd(ours_l, cot), _fwd_bwd(xla_l, cot)))):
        a, b = _time(fo, whole_args, rounds), _time(fx, whole_args, rounds)
        row = {"section": "pieces", "model": dims["model"], "dims": dims, "piece": "layer", "mode": mode,
               "ours_us": a.get("us"), "xla_us": b.get("us")}
        if a.get("us") and b.get("us"):
            row["speed_vs_xla"] = round(b["us"] / a["us"], 3)
            gaps = {p: r["gap_us_in_layer"] for (p, m), r in found.items() if m == mode}
            row["gap_us"] = round(a["us"] - b["us"], 1)
            row["pieces_gap_us"] = gaps
            row["glue_gap_us"] = round(row["gap_us"] - sum(gaps.values()), 1)
        write(row)


def blocks(dims: dict, rounds: int, write, top: int = 6) -> None:
    """Each matmul of the layer at the cost model's `top` cheapest candidates that fit, and its
    `top` cheapest whose block_k is the whole contraction (where it is within the cap), forward."""
    mm = load.family("matmul")
    bl = mm.pallas.blocks
    rng = np.random.default_rng(1)
    t, d, f, width = dims["tokens"], dims["d"], dims["ffn"], dims["heads"] * dims["head_dim"]
    xmm = layer._xla_kernels()[0]
    for name, (m, k, n) in (("proj", (t, d, width)), ("ffn_up", (t, d, f)), ("ffn_down", (t, f, d))):
        a, b = _bf16(rng, (m, k)), _bf16(rng, (k, n), k**-0.5)
        chosen = bl.choose(m, k, n, 2)
        pool = sorted(
            (bl.seconds(m, k, n, bm, bn, bk, 2), bm, bn, bk)
            for bm in bl.candidates(m, 128, bl.BLOCK_CAP["m"])
            for bn in bl.candidates(n, 128, bl.BLOCK_CAP["n"])
            for bk in bl.candidates(k, 128, bl.BLOCK_CAP["k"])
            if mm.pallas._vmem.fits(bl.vmem_need(bm, bn, bk, 2))
        )[:top]
        one_step = sorted(
            (bl.seconds(m, k, n, bm, bn, k, 2), bm, bn, k)
            for bm in bl.candidates(m, 128, bl.BLOCK_CAP["m"])
            for bn in bl.candidates(n, 128, bl.BLOCK_CAP["n"])
            if k <= bl.BLOCK_CAP["k"] and mm.pallas._vmem.fits(bl.vmem_need(bm, bn, k, 2))
        )[:top]  # block_k the whole contraction: one step, no accumulator
        tried = {(chosen.m, chosen.n, chosen.k)} | {(bm, bn, bk) for _, bm, bn, bk in pool + one_step}
        xla_us = _time(xmm, (a, b), rounds).get("us")
        for bm, bn, bk in sorted(tried):
            r = _time(lambda x, y, bm=bm, bn=bn, bk=bk: mm.pallas.matmul(x, y, block_m=bm, block_n=bn, block_k=bk),
                      (a, b), rounds)
            row = {"section": "blocks", "model": dims["model"], "piece": name, "shape": [m, k, n],
                   "blocks": [bm, bn, bk], "default": (bm, bn, bk) == (chosen.m, chosen.n, chosen.k),
                   "predicted_us": round(bl.seconds(m, k, n, bm, bn, bk, 2) * 1e6, 1), "us": r.get("us"),
                   "k_steps": -(-k // bk),
                   "xla_us": xla_us}
            if "error" in r:
                row["error"] = r["error"]
            if r.get("us") and xla_us:
                row["speed_vs_xla"] = round(xla_us / r["us"], 3)
            write(row)


def _from_rows(fn, shape, *rows):
    """fn over [1, tokens, heads, head_dim] views of [tokens, heads * head_dim] rows, its result
    as rows again."""
    return fn(*(r.reshape(shape) for r in rows)).reshape(rows[0].shape)


def layouts(dims: dict, rounds: int, write, blocks=((None, None), (512, 512), (1024, 512), (512, 1024),
                                                   (1024, 1024), (256, 512))) -> None:
    """Causal attention at a layer's dims with no transposes timed: the family by token and by
    head (inputs made in each layout) at its default and at `blocks` (block_q, block_k), and
    JAX's flash attention by head (512-blocks, as the layer's XLA side), forward and forward +
    backward: whether a by-token gap is the layout's (strided rows) or the kernel's."""
    t, h, hd = dims["tokens"], dims["heads"], dims["head_dim"]
    attn = load.family("attention").pallas
    rng = np.random.default_rng(2)
    by_head = tuple(_bf16(rng, (1, h, t, hd)) for _ in range(3))
    # by token as a projection writes it, [tokens, heads * head_dim] (made once, outside the
    # timing), viewed as [1, tokens, heads, head_dim] inside: a stored [1, tokens, 12, 128] array
    # has its heads padded to a tile, and its view as rows of heads * head_dim would be a copy
    flat = tuple(jnp.swapaxes(a, 1, 2).reshape(t, h * hd) for a in by_head)
    cot_head, xattn = _bf16(rng, (1, h, t, hd)), layer._xla_kernels()[2]
    cot_flat = jnp.swapaxes(cot_head, 1, 2).reshape(t, h * hd)
    sides = [("jax_flash_512", xattn, by_head, cot_head, False)]
    for bq, bk in blocks:
        name = "default" if bq is None else f"{bq}x{bk}"
        kw = {} if bq is None else dict(block_q=bq, block_k=bk)
        for layout, fwd, full, bwd, args, cot in (
            ("by_token", attn.attention_out_by_token, attn.attention_by_token, attn.attention_backward_by_token,
             flat, cot_flat),
            ("by_head", attn.attention_out, attn.attention, attn.attention_backward, by_head, cot_head),
        ):
            fn = layer._causal_attention(fwd, full, bwd, kw)
            if layout == "by_token":
                fn = functools.partial(_from_rows, fn, (1, t, h, hd))
            sides.append((f"family_{layout}_{name}", fn, args, cot, layout == "by_token"))
    for mode in ("fwd", "fwd_bwd"):
        first = None
        for side, fn, args, cot, swapped in sides:
            f = fn if mode == "fwd" else _fwd_bwd(fn, cot)
            r = _time(f, args, rounds)
            row = {"section": "layouts", "model": dims["model"], "shape": [1, h, t, hd], "mode": mode, "side": side}
            row.update(r)
            if "error" not in r:  # each side's result by head, against JAX's flash attention's
                out = [np.asarray(jnp.swapaxes(o.reshape(1, t, h, hd), 1, 2) if swapped else o, np.float32)
                       for o in jax.tree_util.tree_leaves(jax.jit(f)(*args))]
                first = out if first is None else first
                row["err_vs_flash"] = max(measure.normwise(o, ref) for o, ref in zip(out, first))
            write(row)


def main(argv=None) -> None:
    ap = probes.arguments(__doc__, "layer_pieces_probe.jsonl", SECTIONS)
    ap.add_argument("--dims", default=None, help="T,d,heads,head_dim,ffn;... (default: the drawn record's layers)")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    if args.interpret:
        probes.use_interpreter()
    only = set(args.only.split(","))
    with probes.lines(args.out, shown=300) as write:
        write({"section": "meta", "device": str(jax.devices()[0].device_kind), "jax": jax.__version__})
        for dims in _dims(args.dims, args.quick):
            if "pieces" in only:
                pieces(dims, args.rounds, write)
            if "blocks" in only:
                blocks(dims, args.rounds, write)
            if "layouts" in only:
                layouts(dims, args.rounds, write, **({"blocks": ((None, None), (128, 128))} if args.quick else {}))


if __name__ == "__main__":
    main()
