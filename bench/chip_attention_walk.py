"""The attention family's grid walk on a TPU: its JAX half at two kernel versions, or at several
blocks, in one process, each variant timed twice in alternating order (min of each), at the
attention family bench's draws (bench/chip_attention_family.py), bf16, causal.

Sections:
  ab        the tree's pallas.py against an earlier one (--before FILE, e.g. `git show
            555d270:tpu_kernels/kernels/attention/pallas.py > before.py`), default blocks,
            forward (attention_out) and forward + backward; the largest difference of their
            outputs (0: bitwise equal).
  blocks    the tree at its default blocks and at 512x512, 512x1024, 1024x512, at the draws
            where torch_tpu's SDPA led (bench/reports/chip_v5e_attention_family.json).
  triangle  a causal forward's default (the triangle of blocks it walks) against the blocks
            the covered length alone would take, at the draws where the two differ.
  fused     forward + backward with the backward's dQ fused into the dK/dV kernel against the two
            kernels (`pallas._backward(fused=...)`), forced either way, and XLA's attention and its
            vjp, interleaved, at the draws of at most FUSED tokens (bf16; float32 too up to SHORT)
            and at the qwen2.5-1.5b layer's attention by token (2560 tokens); each row says
            whether the default fuses there (`pallas._fused_fits`).
  diagonal  the causal diagonal blocks run in row chunks (`pallas._diagonal`: each chunk reads the
            keys up to its last row) against whole blocks, forward (attention_out) and forward +
            backward (the default fusing rule): the tree's default; its blocks with chunks of 128
            and 256 rows, both or the backward's alone, or none; and one block over the whole
            sequence in chunks of 128 or 256 (where they divide it, up to WHOLE tokens), with
            XLA's attention and its vjp, interleaved, at the draws without a window up to SHORT
            tokens, three models' heads at LENGTHS, then the longer draws (bf16).
  short     forward + backward at the draws of at most SHORT tokens, where XLA's dense attention
            is closest: the default blocks, other backward blocks (128 to the whole sequence),
            and a few forward-and-backward pairs, against XLA's attention and its vjp, all
            timed with their rounds interleaved (measure.time_interleaved).

    python3 bench/chip_attention_walk.py --only ab --before before.py [--seconds S] [--out FILE]
    python3 bench/chip_attention_walk.py --only ab --before before.py --quick --interpret  # CPU
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import chip_attention_family as family  # noqa: E402

from tpu_kernels.chip import probes  # noqa: E402

SECTIONS = {"ab": "two kernel versions", "blocks": "blocks", "triangle": "the causal forward's blocks",
            "short": "blocks at short sequences, against XLA", "fused": "the fused backward against two kernels",
            "diagonal": "the diagonal blocks in row chunks, against whole blocks and XLA"}
SHORT = 1408
WHOLE = 2048
FUSED = 4352
LAYER = {"model": "qwen2.5-1.5b layer", "tokens": 2560, "window": None, "heads": 12, "kv_heads": 2, "head_dim": 128}
SDPA_LED = (("qwen2.5-32b", 9472), ("qwen2-7b", 4352), ("gemma-7b", 4096), ("gemma-7b", 28032))
BLOCKS = ((None, None), (512, 512), (512, 1024), (1024, 512))


def _module(path: str):
    spec = importlib.util.spec_from_file_location("attention_before", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _variants(section: str, new, before, p: dict) -> dict:
    """name -> (pallas module, block_q, block_k) for one draw; {} where the section skips it."""
    if section == "ab":
        return {"before": (before, None, None), "after": (new, None, None)}
    if section == "blocks":
        if (p["model"], p["tokens"]) not in SDPA_LED:
            return {}
        return {f"{bq}x{bk}": (new, bq, bk) for bq, bk in BLOCKS}
    t = p["tokens"]
    tri = new._default_block(t, True)  # the triangle rule's block (not `_whole`'s, which ends below these draws)
    covered = new._default_block(t)  # the covered length's block (the backward's, before 228cb04)
    if tri == covered or p["window"] is not None:
        return {}
    return {"covered": (new, covered, covered), "triangle": (new, None, None)}


def _draws(quick: bool) -> list[dict]:
    """The family bench's draws; quick: the first and the last at CPU sizes (2 heads, 1 kv
    head, 256 tokens), for the machinery in Pallas' interpreter."""
    ps = family.draws()
    if quick:
        ps = [
            dict(p, heads=2, kv_heads=1, tokens=256, window=(128 if p["window"] else None))
            for p in ps[:1] + ps[-1:]
        ]
    return ps


def _section(section: str, new, before, write, deadline: float, quick: bool = False) -> None:
    import jax
    import jax.numpy as jnp

    from tpu_kernels.chip import measure

    for idx, p in enumerate(_draws(quick)):
        variants = _variants(section, new, before, p)
        if not variants:
            continue
        if time.time() > deadline:
            write({"section": section, "cut": p["model"], "tokens": p["tokens"]})
            return
        h, hk, t, d, w = p["heads"], p["kv_heads"], p["tokens"], p["head_dim"], p["window"]
        keys = jax.random.split(jax.random.PRNGKey(idx), 4)
        q, k, v, do = (
            jax.random.normal(key, (1, n, t, d), jnp.float32).astype(jnp.bfloat16)
            for key, n in zip(keys, (h, hk, hk, h))
        )
        for what in ("forward",) if section == "triangle" else ("forward", "forward+backward"):
            row = {"section": section, "point": family._tag(p, "bf16"), "what": what}
            outs, names = {}, list(variants)
            for rep, order in enumerate((names, names[::-1])):
                for name in order:
                    mod, bq, bk = variants[name]
                    kw = dict(causal=True, window=w, block_q=bq, block_k=bk)
                    if what == "forward":
                        args = (q, k, v)

                        def fn(q, k, v, mod=mod, kw=kw):
                            return mod.attention_out(q, k, v, **kw)
                    else:
                        args = (q, k, v, do)

                        def fn(q, k, v, do, mod=mod, kw=kw):
                            out, lse = mod.attention(q, k, v, **kw)
                            return mod.attention_backward(q, k, v, out, lse, do, **kw)

                    compiled, _, err = measure.compile_fn(fn, args)
                    if err:
                        row[f"{name}_error"] = err[:300]
                        continue
                    rounds = 1 if quick else 5
                    row[f"{name}_us{rep}"] = round(measure.timed(compiled, args, rounds=rounds) * 1e6, 1)
                    if rep == 0:
                        out = compiled(*args)
                        outs[name] = out if isinstance(out, tuple) else (out,)
            for name in names[1:]:
                if name in outs and names[0] in outs:
                    row[f"{name}_maxdiff"] = max(
                        float(jnp.max(jnp.abs(a.astype(jnp.float32) - b.astype(jnp.float32))))
                        for a, b in zip(outs[name], outs[names[0]])
                    )
            write(row)


def _compile_all(fns: dict, args: tuple, base: dict, write) -> tuple[dict, dict]:
    """(name -> compiled, name -> its outputs at args) for the sides that compile; a side that
    does not is written as a row of base with its error."""
    from tpu_kernels.chip import measure

    compiled, outs = {}, {}
    for name, fn in fns.items():
        c, _, err = measure.compile_fn(fn, args)
        if err:
            write({**base, "variant": name, "error": err[:300]})
            continue
        compiled[name], outs[name] = c, c(*args)
    return compiled, outs


def _short_pairs(t: int) -> list[tuple[tuple, tuple]]:
    """(forward blocks, backward blocks) pairs of the short section; None: the default."""
    d = (None, None)
    return [(d, d), (d, (128, 128)), (d, (256, 256)), (d, (512, 512)), (d, (256, 512)), (d, (512, 256)),
            (d, (1024, 1024)), (d, (t, t)), (d, (512, t)), (d, (t, 512)), ((128, 128), (128, 128)),
            ((256, 256), (256, 256)), ((1024, 1024), (1024, 1024)), ((t, t), (t, t))]


def _short(new, write, quick: bool = False) -> None:
    import jax
    import jax.numpy as jnp

    from tpu_kernels.chip import load, measure

    xla = load.family("attention").jax_reference.attention_xla
    for idx, p in enumerate(_draws(quick)):
        h, hk, t, d = p["heads"], p["kv_heads"], p["tokens"], p["head_dim"]
        if t > SHORT or p["window"] is not None:
            continue
        keys = jax.random.split(jax.random.PRNGKey(idx), 4)
        args = tuple(jax.random.normal(key, (1, n, t, d), jnp.float32).astype(jnp.bfloat16)
                     for key, n in zip(keys, (h, hk, hk, h)))
        fns = {}
        for fb, bb in _short_pairs(128 if quick else t):
            if quick and (max(x or 0 for x in fb + bb) > 128):
                continue  # the interpreter's sizes: 256 tokens

            def fn(q, k, v, do, fb=fb, bb=bb):
                out, lse = new.attention(q, k, v, causal=True, block_q=fb[0], block_k=fb[1])
                return new.attention_backward(q, k, v, out, lse, do, causal=True, block_q=bb[0], block_k=bb[1])

            fns[f"fwd{fb[0]}x{fb[1]} bwd{bb[0]}x{bb[1]}"] = fn

        def xla_grad(q, k, v, do):
            _, vjp = jax.vjp(lambda q, k, v: xla(q, k, v, causal=True), q, k, v)
            return vjp(do)

        fns["xla"] = xla_grad
        compiled, outs = _compile_all(fns, args, {"section": "short", "point": family._tag(p, "bf16")}, write)
        times = measure.time_interleaved(compiled, args, rounds=1 if quick else 5)
        for name, tm in times.items():
            row = {"section": "short", "point": family._tag(p, "bf16"), "what": "forward+backward", "variant": name}
            if isinstance(tm, Exception):
                row["error"] = measure.error_text(tm)
            else:
                row["us"] = round(tm * 1e6, 1)
                row["err_vs_xla"] = max(measure.normwise(a, jnp.asarray(b, jnp.float32))
                                        for a, b in zip(outs[name], outs["xla"])) if "xla" in outs else None
            write(row)


def _fused(new, write, quick: bool = False) -> None:
    from tpu_kernels.chip import load

    xla = load.family("attention").jax_reference.attention_xla
    points = [(p, layout, dtype) for p in _draws(quick) if p["tokens"] <= (256 if quick else FUSED) and p["window"] is None
              for layout in (new.BY_HEAD,) for dtype in ("bf16", "f32") if dtype == "bf16" or p["tokens"] <= SHORT]
    points.append((dict(LAYER, tokens=256, heads=2, kv_heads=1) if quick else LAYER, new.BY_TOKEN, "bf16"))
    for idx, (p, layout, dtype) in enumerate(points):
        _fused_point(new, xla, write, idx, p, layout, dtype, quick)


def _fused_point(new, xla, write, idx: int, p: dict, layout: str, dtype: str, quick: bool) -> None:
    """One row of the fused section: the fused backward, the two kernels and XLA at draw p."""
    import jax
    import jax.numpy as jnp

    from tpu_kernels.chip import measure

    h, hk, t, d = p["heads"], p["kv_heads"], p["tokens"], p["head_dim"]
    keys = jax.random.split(jax.random.PRNGKey(idx), 4)
    dt = jnp.bfloat16 if dtype == "bf16" else jnp.float32
    heads = dict(zip("qkvo", (h, hk, hk, h)))
    shape = (lambda n: (1, t, n, d)) if layout == new.BY_TOKEN else (lambda n: (1, n, t, d))
    args = tuple(jax.random.normal(key, shape(heads[x]), jnp.float32).astype(dt) for key, x in zip(keys, "qkvo"))
    by_token = layout == new.BY_TOKEN
    fwd = new.attention_by_token if by_token else new.attention
    plan = new._plan(*(jax.ShapeDtypeStruct((1, n, t, d), dt) for n in (h, hk)), True, None, None, None,
                     forward=False)
    fns = {}
    for fused in (True, False):
        def fn(q, k, v, do, fused=fused):
            out, lse = fwd(q, k, v, causal=True)
            return new._backward(q, k, v, out, lse, do, True, None, None, None, None, layout, fused=fused)

        fns["fused" if fused else "two"] = fn

    def xla_grad(q, k, v, do):
        heads_first = (lambda x: jnp.swapaxes(x, 1, 2)) if by_token else (lambda x: x)
        f = lambda q, k, v: heads_first(xla(*map(heads_first, (q, k, v)), causal=True))  # noqa: E731
        _, vjp = jax.vjp(f, q, k, v)
        return vjp(do)

    fns["xla"] = xla_grad
    base = {"section": "fused", "point": family._tag(p, dtype), "layout": layout, "what": "forward+backward",
            "fused_bytes": new._fused_bytes(plan, d, jnp.dtype(dt).itemsize),
            "default_fuses": new._fused_fits(plan, d, jnp.dtype(dt).itemsize), "blocks": [plan.bq, plan.bk]}
    compiled, outs = _compile_all(fns, args, base, write)
    times = measure.time_interleaved(compiled, args, rounds=1 if quick else 5)
    row = dict(base)
    for name, tm in times.items():
        if isinstance(tm, Exception):
            row[f"{name}_error"] = measure.error_text(tm)
        else:
            row[f"{name}_us"] = round(tm * 1e6, 1)
    if "fused" in outs and "two" in outs:
        row["fused_maxdiff"] = max(float(jnp.max(jnp.abs(a.astype(jnp.float32) - b.astype(jnp.float32))))
                                   for a, b in zip(outs["fused"], outs["two"]))
    if "xla" in outs:
        for name in ("fused", "two"):
            if name in outs:
                row[f"{name}_err_vs_xla"] = max(measure.normwise(a, jnp.asarray(b, jnp.float32))
                                                for a, b in zip(outs[name], outs["xla"]))
    for name in ("fused", "two"):
        if f"{name}_us" in row and "xla_us" in row:
            row[f"{name}_vs_xla"] = round(row["xla_us"] / row[f"{name}_us"], 3)
    if "fused_us" in row and "two_us" in row:
        row["fused_vs_two"] = round(row["two_us"] / row["fused_us"], 3)
    write(row)


def _diagonal_variants(t: int, quick: bool) -> dict:
    """name -> (forward block, backward block, forward sub, backward sub) of the diagonal section
    at t tokens (block None: the default's; sub None: the default's)."""
    variants = {"whole blocks": (None, None, 0, 0), "sub128": (None, None, 128, 128),
                "sub256": (None, None, 256, 256), "backward sub256": (None, None, 0, 256),
                "default": (None, None, None, None), "before": (*BEFORE(t), 0, 0)}
    if t > 1024 and t % 768:
        variants["backward 768"] = (None, 768, None, None)
    for sub in (128, 256):
        if t % sub == 0 and t // sub >= 2 and t <= (256 if quick else WHOLE):
            variants[f"{t} sub{sub}"] = (t, t, sub, sub)
    return variants


def BEFORE(t: int) -> tuple[int, int]:  # noqa: N802 - a table, as SHAPES
    """The default (forward, backward) blocks at t tokens before 1536 tokens could run as one
    block (`pallas._whole`), for the causal square: `pallas._default_block`."""
    from tpu_kernels.chip import load

    pallas = load.family("attention").pallas
    return pallas._default_block(t, True, False), pallas._default_block(t, False, True)


SHAPES = (("llama-3.2-1b", 32, 8, 64), ("llama-3-8b", 32, 8, 128), ("gemma-2-2b", 8, 4, 256))
LENGTHS = (768, 1024, 1536, 2048)


def _diagonal_points(quick: bool) -> list[tuple[dict, tuple[str, ...]]]:
    """(draw, whats): the draws of at most SHORT tokens, forward and forward + backward, then
    three models' heads at LENGTHS, forward + backward, then forward, then the longer draws."""
    draws = sorted((p for p in _draws(quick) if p["window"] is None), key=lambda p: p["tokens"])
    both = ("forward", "forward+backward")
    short = [(p, both) for p in draws if p["tokens"] <= (256 if quick else SHORT)]
    lengths = (256,) if quick else LENGTHS
    made = [dict(model=m, tokens=t, window=None, heads=2 if quick else h, kv_heads=1 if quick else hk, head_dim=d)
            for t in lengths for m, h, hk, d in SHAPES]
    longer = [(p, both) for p in draws if p["tokens"] > (256 if quick else SHORT)]
    return short + [(p, ("forward+backward",)) for p in made] + [(p, ("forward",)) for p in made] + longer


def _diagonal(new, write, deadline: float, quick: bool = False, only: tuple[str, ...] = ()) -> None:
    """The diagonal section; only: the variants to run (all where empty)."""
    import jax
    import jax.numpy as jnp

    from tpu_kernels.chip import load, measure

    xla = load.family("attention").jax_reference.attention_xla
    for idx, (p, whats) in enumerate(_diagonal_points(quick)):
        if time.time() > deadline:
            write({"section": "diagonal", "cut": p["model"], "tokens": p["tokens"]})
            return
        h, hk, t, d = p["heads"], p["kv_heads"], p["tokens"], p["head_dim"]
        keys = jax.random.split(jax.random.PRNGKey(idx), 4)
        args = tuple(jax.random.normal(key, (1, n, t, d), jnp.float32).astype(jnp.bfloat16)
                     for key, n in zip(keys, (h, hk, hk, h)))
        shapes = [jax.ShapeDtypeStruct((1, n, t, d), jnp.bfloat16) for n in (h, hk)]
        for what in whats:
            fns, plans = {}, {}
            for name, (fb, bb, fs, bs) in _diagonal_variants(t, quick).items():
                if only and name not in only:
                    continue
                fwd_plan = new._plan(*shapes, True, None, fb, fb, forward=True, sub=fs)
                bwd_plan = new._plan(*shapes, True, None, bb, bb, forward=False, sub=bs)
                plans[name] = {"forward": [fwd_plan.bq, fwd_plan.sub], "backward": [bwd_plan.bq, bwd_plan.sub],
                               "fused": new._fused_fits(bwd_plan, d, 2)}
                if what == "forward":
                    def fn(q, k, v, do, fb=fb, fs=fs):
                        return new._forward(q, k, v, True, None, None, fb, fb, False, sub=fs)[0]
                else:
                    def fn(q, k, v, do, fb=fb, bb=bb, fs=fs, bs=bs):
                        out, lse = new._forward(q, k, v, True, None, None, fb, fb, True, sub=fs)
                        return new._backward(q, k, v, out, lse, do, True, None, None, bb, bb, new.BY_HEAD, sub=bs)
                fns[name] = fn

            def xla_fn(q, k, v, do, what=what):
                if what == "forward":
                    return xla(q, k, v, causal=True)
                _, vjp = jax.vjp(lambda q, k, v: xla(q, k, v, causal=True), q, k, v)
                return vjp(do)

            fns["xla"] = xla_fn
            base = {"section": "diagonal", "point": family._tag(p, "bf16"), "what": what}
            compiled, outs = _compile_all(fns, args, base, write)
            outs = {name: out if isinstance(out, tuple) else (out,) for name, out in outs.items()}
            times = measure.time_interleaved(compiled, args, rounds=1 if quick else 5)
            for name, tm in times.items():
                row = {**base, "variant": name, **({"plan": plans[name]} if name in plans else {})}
                if isinstance(tm, Exception):
                    row["error"] = measure.error_text(tm)
                    write(row)
                    continue
                row["us"] = round(tm * 1e6, 1)
                if name != "xla" and "xla" in outs:
                    row["err_vs_xla"] = max(measure.normwise(a, jnp.asarray(b, jnp.float32))
                                            for a, b in zip(outs[name], outs["xla"]))
                    xla_time = times.get("xla")
                    if not isinstance(xla_time, Exception) and xla_time:
                        row["vs_xla"] = round(xla_time / tm, 3)
                write(row)


def main(argv: list[str] | None = None) -> int:
    ap = probes.arguments(__doc__, "chip_attention_walk.jsonl", SECTIONS)
    ap.add_argument("--before", help="an earlier pallas.py (section ab)")
    ap.add_argument("--variants", default="", help="the diagonal section's variants to run, comma-separated")
    ap.add_argument("--seconds", type=float, default=280.0, help="start no draw after this long")
    args = ap.parse_args(argv)
    if args.interpret:
        probes.use_interpreter()
    from tpu_kernels.chip import load

    new = load.family("attention").pallas  # torch-free, as the chip runner loads it
    before = _module(args.before) if args.before else None
    deadline = time.time() + args.seconds
    with probes.lines(args.out, shown=600) as write:
        for section in args.only.split(","):
            if section == "ab" and before is None:
                raise SystemExit("chip_attention_walk: section ab needs --before FILE (an earlier pallas.py)")
            if section in ("short", "fused"):
                (_short if section == "short" else _fused)(new, write, args.quick)
                continue
            if section == "diagonal":
                _diagonal(new, write, deadline, args.quick, tuple(filter(None, args.variants.split(","))))
                continue
            _section(section, new, before, write, deadline, args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
