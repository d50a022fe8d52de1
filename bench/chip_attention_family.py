"""The shipped attention family (tpu_kernels/kernels/attention) on a TPU, at shapes drawn from
public model configs: against JAX's Pallas flash attention, XLA's attention, and, through torch,
torch_tpu's scaled_dot_product_attention.

Draws (`draws(seed)`): models from the chip runner's table (`tpu_kernels.chip.drawn.MODELS`,
which gives heads, kv heads and head_dim: GQA 1:1 to 8:1, head_dim 64 to 256), sequences
log-uniform in 1024-32768 rounded to 128, batch 1, causal. A point's kv heads are cut (the
group kept) until its forward is at most MAX_FLOPS; the record keeps the cut. Besides the
draws: two sequences no 128 divides, and two sliding windows of 4096 (Mistral's and Gemma 2's
local layers).

Sections:
  jax    the family's JAX half (pallas.attention, and attention_backward after it) against
         JAX's flash attention at 512-blocks (where 512, 256 or 128 divides the sequence; it has
         no GQA, so k and v are repeated inside its program, and its gradients summed back) and
         XLA's `jax.nn.dot_product_attention` (GQA native; where its float32 scores fit in
         XLA_SCORES bytes). Forward, and forward + backward; the sides' rounds interleaved
         (measure.time_interleaved; the record's runs before 3d9b64a timed each side in turn), and
         where a side's call is under twice the dispatch floor, every side again as n calls in
         one program (`*_in_program_us`). Error: normwise against XLA's, or JAX flash's where
         XLA does not run.
  torch  the torch op (torch.ops.tpu_kernels.attention on TPU tensors) against torch_tpu's
         `F.scaled_dot_product_attention(..., is_causal=True, enable_gqa=True)`: forward, and
         forward + backward (out.backward), n calls then one wait, each call's result read.

    python3 bench/chip_attention_family.py [--only jax,torch] [--seed N] [--max-tokens T] [--out FILE] [--quick --interpret]
"""

from __future__ import annotations

import functools
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tpu_kernels.chip import drawn, probes  # noqa: E402

SECTIONS = {"jax": "the JAX half against JAX flash and XLA", "torch": "the torch op against torch_tpu's SDPA"}
SEED = 604317
COUNT = 10
SEQ = (1024, 32768)
MAX_FLOPS = 1e12  # a forward's matmul flops (causal half): ~7 ms at the v5e's bf16 peak
XLA_SCORES = 4 << 30  # bytes of XLA's float32 [heads, T, T] scores it may hold
EXTRA = (  # (model, tokens, window): ragged sequences, and sliding windows
    ("llama-3-8b", 3000, None),
    ("qwen2.5-1.5b", 5333, None),
    ("mistral-7b", 8192, 4096),
    ("gemma-2-2b", 12288, 4096),
)


def draws(seed: int = SEED) -> list[dict]:
    """The draw of `seed` (COUNT points, then EXTRA): model, tokens, window, and the shape after
    the cut (batch 1; kv heads cut, the group kept, until the forward is at most MAX_FLOPS)."""
    rng = np.random.default_rng(seed)
    picks = []
    for _ in range(COUNT):
        model = drawn.MODELS[int(rng.integers(len(drawn.MODELS)))]
        t = math.exp(rng.uniform(math.log(SEQ[0]), math.log(SEQ[1])))
        picks.append((model.name, int(round(t / 128)) * 128, None))
    out = []
    for name, t, window in [*picks, *EXTRA]:
        m = next(x for x in drawn.MODELS if x.name == name)
        group, kv = m.heads // m.kv_heads, m.kv_heads
        while kv > 1 and flops(group * kv, t, m.head_dim, window) > MAX_FLOPS:
            kv //= 2
        out.append(
            {
                "model": name,
                "tokens": t,
                "window": window,
                "heads": group * kv,
                "kv_heads": kv,
                "head_dim": m.head_dim,
                "cut": kv != m.kv_heads,
            }
        )
    return out


def flops(heads: int, t: int, d: int, window: int | None) -> float:
    """A causal forward's matmul flops (q k^T and p v over the visible keys)."""
    seen = t * (t + 1) / 2 if window is None else sum(min(i + 1, window) for i in range(0, t, 1))
    return 4.0 * heads * seen * d


def _tag(p: dict, dtype: str) -> str:
    w = f"/window={p['window']}" if p["window"] else ""
    return f"{p['model']}/{dtype}[1,{p['heads']},{p['kv_heads']},{p['tokens']},{p['head_dim']}]{w}"


# ---- JAX ------------------------------------------------------------------------------------


def _jax_section(ps: list[dict], dtypes: dict[int, str], write, rounds: int, floor_s: float) -> None:
    import jax
    import jax.numpy as jnp

    from tpu_kernels.chip import load, measure, point

    half = load.family("attention")  # torch-free, as the chip runner loads it
    pallas, attention_xla = half.pallas, half.jax_reference.attention_xla

    for idx, p in enumerate(ps):
        dt = dtypes.get(idx, "bf16")
        dtype = jnp.bfloat16 if dt == "bf16" else jnp.float32
        h, hk, t, d, w = p["heads"], p["kv_heads"], p["tokens"], p["head_dim"], p["window"]
        group, scale = h // hk, 1.0 / math.sqrt(d)
        key = jax.random.PRNGKey(idx)
        kq, kk, kv, kd = jax.random.split(key, 4)
        q = jax.random.normal(kq, (1, h, t, d), jnp.float32).astype(dtype)
        k = jax.random.normal(kk, (1, hk, t, d), jnp.float32).astype(dtype)
        v = jax.random.normal(kv, (1, hk, t, d), jnp.float32).astype(dtype)
        do = jax.random.normal(kd, (1, h, t, d), jnp.float32).astype(dtype)

        def ours(q, k, v, w=w):  # out alone, as JAX's flash returns it (runs before 3424560: attention()[0])
            return pallas.attention_out(q, k, v, causal=True, window=w)

        def ours_grad(q, k, v, do, w=w):
            out, lse = pallas.attention(q, k, v, causal=True, window=w)
            return pallas.attention_backward(q, k, v, out, lse, do, causal=True, window=w)

        impls = {"ours": ours}
        flash_block = next((b for b in (512, 256, 128) if t % b == 0), None)
        if w is None and flash_block:
            flash = point.jax_flash(True, scale, flash_block)
            impls["jax_flash"] = point.repeated(flash, group)  # no GQA: k and v repeated in its program
        if h * t * t * 4 <= XLA_SCORES:
            impls["xla"] = functools.partial(attention_xla, causal=True, scale=scale, window=w)
        grads = {name: point.grad_of(f) for name, f in impls.items() if name != "ours"}
        grads["ours"] = ours_grad
        fl = flops(h, t, d, w)
        for what, fns, args, work in (
            ("forward", impls, (q, k, v), fl),
            ("forward+backward", grads, (q, k, v, do), 3.5 * fl),
        ):
            row = {
                "section": "jax",
                "id": f"attention/{what}/{_tag(p, dt)}",
                "point": p,
                "dtype": dt,
                "what": what,
            }
            outs, times, compiled = {}, {}, {}
            for name, fn in fns.items():
                c, _, err = measure.compile_fn(fn, args)
                if err:
                    row[f"{name}_error"] = err
                    continue
                compiled[name], outs[name] = c, c(*args)
            for name, t in measure.time_interleaved(compiled, args, rounds=rounds).items():
                if isinstance(t, Exception):
                    row[f"{name}_error"] = measure.error_text(t)
                    continue
                times[name] = t
                row[f"{name}_us"] = round(t * 1e6, 1)
                row[f"{name}_spread"] = None if t.spread is None else round(t.spread, 3)
            for base in ("jax_flash", "xla"):
                if "ours" in times and base in times:
                    row[f"vs_{base}"] = round(times[base] / times["ours"], 3)
            if times and min(times.values()) < 2 * floor_s:  # the call is mostly dispatch: time n in one program
                looped = {}
                for name in times:
                    c, _, err = measure.compile_fn(measure.in_one_program(fns[name]), args)
                    if err:
                        row[f"{name}_in_program_error"] = err
                    else:
                        looped[name] = c
                n = measure.IN_PROGRAM_CALLS
                for name, t in measure.time_interleaved(looped, args, rounds=rounds, round_s=0.05).items():
                    if not isinstance(t, Exception):
                        row[f"{name}_in_program_us"] = round(t / n * 1e6, 1)
                for base in ("jax_flash", "xla"):
                    if "ours_in_program_us" in row and f"{base}_in_program_us" in row:
                        row[f"vs_{base}_in_program"] = round(row[f"{base}_in_program_us"] / row["ours_in_program_us"], 3)
            ref = "xla" if "xla" in outs else "jax_flash"
            if "ours" in outs and ref in outs:
                mine = outs["ours"] if isinstance(outs["ours"], tuple) else (outs["ours"],)
                theirs = outs[ref] if isinstance(outs[ref], tuple) else (outs[ref],)
                row["err_vs"] = ref
                row["err"] = max(measure.normwise(a, np.asarray(b, np.float64)) for a, b in zip(mine, theirs))
            if "ours" in times:
                row["ours_tflops"] = round(work / times["ours"] / 1e12, 1)
            write(row)


# ---- torch ----------------------------------------------------------------------------------


def _torch_section(ps: list[dict], write, rounds: int) -> None:
    import torch
    import torch.nn.functional as F

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from torch_on_tpu import per_call_us, read_first

    from tpu_kernels.kernels import attention

    dev = torch.device("tpu")
    for idx, p in enumerate(ps):
        h, hk, t, d, w = p["heads"], p["kv_heads"], p["tokens"], p["head_dim"], p["window"]
        if w is not None:
            continue  # torch's SDPA takes a window only as a mask tensor
        torch.manual_seed(idx)
        q = torch.randn(1, h, t, d, device=dev, dtype=torch.bfloat16)
        k = torch.randn(1, hk, t, d, device=dev, dtype=torch.bfloat16)
        v = torch.randn(1, hk, t, d, device=dev, dtype=torch.bfloat16)
        g = torch.randn(1, h, t, d, device=dev, dtype=torch.bfloat16)
        impls = {
            "ours": lambda q, k, v: attention(q, k, v, causal=True),
            "torch_tpu_sdpa": functools.partial(
                F.scaled_dot_product_attention, is_causal=True, enable_gqa=hk != h
            ),
        }
        fl = flops(h, t, d, None)
        n = max(2, min(20, int(0.25 / max(fl / 150e12, 1e-5))))
        row_f = {
            "section": "torch",
            "id": f"attention/forward/{_tag(p, 'bf16')}",
            "point": p,
            "what": "forward",
        }
        row_b = {
            "section": "torch",
            "id": f"attention/forward+backward/{_tag(p, 'bf16')}",
            "point": p,
            "what": "forward+backward",
        }
        outs = {}
        for name, fn in impls.items():
            try:
                call = functools.partial(fn, q, k, v)
                row_f[f"{name}_us"] = round(per_call_us(call, n=n, rounds=rounds, settle=read_first), 1)
                outs[name] = fn(q, k, v).float().cpu()
                leaves = [x.detach().requires_grad_(True) for x in (q, k, v)]

                def step(fn=fn, leaves=leaves, g=g):
                    for x in leaves:
                        x.grad = None
                    fn(*leaves).backward(g)
                    return [x.grad for x in leaves]

            except Exception as e:  # a failure is recorded, not raised
                row_f[f"{name}_error"] = f"{type(e).__name__}: {e}"[:600]
                continue
            try:
                row_b[f"{name}_us"] = round(per_call_us(step, n=n, rounds=rounds, settle=read_first), 1)
            except Exception as e:
                row_b[f"{name}_error"] = f"{type(e).__name__}: {e}"[:600]
        for row in (row_f, row_b):
            if "ours_us" in row and "torch_tpu_sdpa_us" in row:
                row["vs_torch_tpu_sdpa"] = round(row["torch_tpu_sdpa_us"] / row["ours_us"], 3)
        if len(outs) == 2:
            a, b = outs["ours"].double(), outs["torch_tpu_sdpa"].double()
            row_f["err"] = float((a - b).norm() / b.norm())
        write(row_f)
        write(row_b)


# ---- the record's tables (docs/performance.md, "Attention") ----------------------------------


def _spread(values: list[float]) -> str:
    if not values:
        return "- | - | -"
    v = sorted(values)
    p10 = v[int(0.1 * (len(v) - 1))]
    return f"{v[0]:.2f}x | {p10:.2f}x | {v[len(v) // 2]:.2f}x"


def summary(record: dict) -> str:
    """Markdown: the last JAX run's speeds against each baseline by pass and dtype (min, p10,
    median, worst point), the torch run's against torch_tpu's SDPA, and the points whose default
    blocks the first run chose differently, before and after."""
    jax_run = [r for r in record["runs"] if r["section"] == "jax" and not r.get("partial")][-1]
    torch_run = [r for r in record["runs"] if r["section"] == "torch"][-1]
    lines = [
        "| pass | dtype | against | points | min | p10 | median | worst point |",
        "|---|---|---|---|---|---|---|---|",
    ]
    groups: dict[tuple, list[dict]] = {}
    for row in jax_run["rows"]:
        groups.setdefault((row["what"], row["dtype"]), []).append(row)
    for (what, dt), rows in groups.items():
        for base in ("jax_flash", "xla"):
            got = [r for r in rows if f"vs_{base}" in r]
            if got:
                worst = min(got, key=lambda r: r[f"vs_{base}"])["id"].split("/", 2)[2]
                lines.append(
                    f"| {what} | {dt} | {base} | {len(got)} | {_spread([r[f'vs_{base}'] for r in got])} | {worst} |"
                )
        alone = [r for r in rows if not any(f"vs_{b}" in r for b in ("jax_flash", "xla"))]
        for r in alone:
            lines.append(
                f"| {what} | {dt} | - (no baseline runs it) | 1 | {r['ours_tflops']} TF/s | | | {r['id'].split('/', 2)[2]} |"
            )
    lines += [
        "",
        "| pass (torch, bf16) | points | vs torch_tpu SDPA: min | p10 | median | torch_tpu SDPA failed |",
        "|---|---|---|---|---|---|",
    ]
    for what in ("forward", "forward+backward"):
        rows = [r for r in torch_run["rows"] if r["what"] == what]
        vs = [r["vs_torch_tpu_sdpa"] for r in rows if "vs_torch_tpu_sdpa" in r]
        failed = sum("torch_tpu_sdpa_error" in r for r in rows)
        lines.append(f"| {what} | {len(rows)} | {_spread(vs)} | {failed} |")
    first = record["runs"][0]
    if first is not jax_run:
        before = {r["id"]: r for r in first["rows"] if "ours_us" in r}
        changed = []
        for r in jax_run["rows"]:
            b = before.get(r["id"])
            if b and "ours_us" in r and b["ours_us"] > 1.15 * r["ours_us"]:
                changed.append((r["id"].split("/", 2)[2], r["what"], b["ours_us"], r["ours_us"]))
        if changed:
            lines += ["", f"| point | pass | {first['commit']} | {jax_run['commit']} |", "|---|---|---|---|"]
            lines += [f"| {pid} | {what} | {b:.0f} us | {a:.0f} us |" for pid, what, b, a in changed]
    lines += _later(record, jax_run)
    return "\n".join(lines)


def _later(record: dict, jax_run: dict) -> list[str]:
    """Markdown lines: each point of a partial JAX run after `jax_run`, and of the last torch
    run, against the run of its section before it (ours, microseconds)."""
    runs = record["runs"]
    pairs = [(jax_run, r) for r in runs[runs.index(jax_run) + 1 :] if r["section"] == "jax"]
    torch_runs = [r for r in runs if r["section"] == "torch"]
    pairs += [tuple(torch_runs[-2:])] if len(torch_runs) > 1 else []
    if not pairs:
        return []
    lines = ["", "| section | point | pass | before | after | speed-up |", "|---|---|---|---|---|---|"]
    for before, after in pairs:
        was = {r["id"]: r["ours_us"] for r in before["rows"] if "ours_us" in r}
        for r in after["rows"]:
            if r["id"] in was and "ours_us" in r:
                lines.append(
                    f"| {after['section']} | {r['id'].split('/', 2)[2]} | {r['what']} | {was[r['id']]:.0f} us "
                    f"({before['commit']}) | {r['ours_us']:.0f} us ({after['commit']}) | "
                    f"{was[r['id']] / r['ours_us']:.2f}x |"
                )
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = probes.arguments(__doc__, "chip_attention_family.jsonl", SECTIONS)
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--max-tokens", type=int, default=None, help="only the draws of at most this many tokens")
    args = ap.parse_args(argv)
    if args.interpret:
        probes.use_interpreter()
    ps = draws(args.seed)
    if args.max_tokens is not None:
        ps = [p for p in ps if p["tokens"] <= args.max_tokens]
    if args.quick:  # the machinery at CPU sizes
        ps = [
            dict(p, heads=2, kv_heads=1, tokens=256, window=(128 if p["window"] else None))
            for p in ps[:1] + ps[-1:]
        ]
    dtypes = {0: "f32", 1: "f32"}  # the first two draws also in float32 (below: each draw's bf16 first)
    only = [s for s in args.only.split(",") if not (args.interpret and s == "torch")]  # torch: a TPU
    rounds = 2 if args.quick else 3
    start = time.time()
    with probes.lines(args.out, shown=400) as write:
        write({"section": "meta", "seed": args.seed, "draws": ps, "started": start})
        if "jax" in only:
            from tpu_kernels.chip import measure

            floor_s = measure.dispatch_floor()
            write({"section": "meta", "dispatch_floor_s": floor_s})
            _jax_section(ps, {}, write, rounds, floor_s)
            _jax_section(ps[:2], dtypes, write, rounds, floor_s)
        if "torch" in only:
            _torch_section(ps, write, rounds)
        write({"section": "meta", "seconds": round(time.time() - start, 1)})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
