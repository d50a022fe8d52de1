"""The fused LM head + cross-entropy (tpu_kernels/kernels/linear_cross_entropy) on a TPU,
against the unfused `F.cross_entropy(hidden @ weight.T, labels)`: time, peak HBM and error.

Points (`points(seed)`): the issue's three vocabularies at 8192 tokens (32000: Llama 2 and
Mistral; 128256: Llama 3; 256000: Gemma), Qwen2's 152064 (no 512-block divides it), and
DRAWS more drawn at run time from the chip runner's model table (`tpu_kernels.chip.drawn.MODELS`:
hidden width and vocabulary) with tokens log-uniform in 1024-16384, rounded to 8. Every fifth
label is ignored (-100), as padding is in a batch.

Sections:
  jax     the family's JAX half (pallas.linear_cross_entropy, then _backward) against XLA's
          unfused path (jax_reference.linear_cross_entropy_xla under jax.value_and_grad):
          forward + backward (the training step), and forward alone (ours: the loss without the
          hidden gradient, `linear_cross_entropy_loss`, which an evaluation call runs; records
          before 6c80fae timed the full forward, hidden gradient included). Error: normwise against the
          unfused path's loss and gradients.
  blocks  each kernel alone at a few (block_t, block_v), at two points.
  memory  peak HBM of one forward + backward, each side in its own process (run before the
          other sections: only one process at a time holds the chip)
          (`memory_stats()["peak_bytes_in_use"]` after the call, and the bytes of the inputs
          before it), at the three vocabularies of the issue.
  torch   the torch op on TPU tensors (torch.ops.tpu_kernels.linear_cross_entropy) against
          torch_tpu's eager `F.cross_entropy(hidden @ weight.T, labels)`: forward + backward
          (loss.backward()), n calls then one read of every result.

    python3 bench/chip_linear_cross_entropy.py [--only jax,blocks,memory,torch] [--out FILE] [--quick --interpret]
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tpu_kernels.chip import drawn, probes  # noqa: E402

SECTIONS = {
    "jax": "the JAX half against XLA's unfused loss",
    "blocks": "the forward and backward kernels alone at BLOCKS, at two points",
    "memory": "peak HBM of each side, in its own process",
    "torch": "the torch op against torch_tpu's unfused loss",
}
SEED = 60
DRAWS = 4
TOKENS = (1024, 16384)
FIXED = (  # (model, tokens): the vocabularies, and one no 512-block divides
    ("llama-2-7b", 8192),
    ("llama-3-8b", 8192),
    ("gemma-7b", 8192),
    ("qwen2-7b", 8192),
)
MEMORY = ("llama-2-7b", "llama-3-8b", "gemma-7b")  # 32k, 128k and 256k vocabularies
BLOCKS = ((512, 256), (256, 512), (1024, 256), (512, 512), (256, 1024), (1024, 512))  # (block_t, block_v)


def points(seed: int = SEED) -> list[dict]:
    """FIXED, then DRAWS points drawn with `seed`: model, tokens, d, vocabulary."""
    rng = np.random.default_rng(seed)
    picks = list(FIXED)
    for _ in range(DRAWS):
        model = drawn.MODELS[int(rng.integers(len(drawn.MODELS)))].name
        t = math.exp(rng.uniform(math.log(TOKENS[0]), math.log(TOKENS[1])))
        picks.append((model, max(8, int(round(t / 8)) * 8)))
    by_name = {m.name: m for m in drawn.MODELS}
    return [{"model": m, "tokens": t, "d": by_name[m].hidden, "vocab": by_name[m].vocab} for m, t in picks]


def _tag(p: dict) -> str:
    return f"{p['model']} [{p['tokens']},{p['d']}]x{p['vocab']}"


def _inputs(p: dict, seed: int):
    import jax
    import jax.numpy as jnp

    kh, kw, ky = jax.random.split(jax.random.PRNGKey(seed), 3)
    hidden = jax.random.normal(kh, (p["tokens"], p["d"]), jnp.float32).astype(jnp.bfloat16)
    weight = (jax.random.normal(kw, (p["vocab"], p["d"]), jnp.float32) * p["d"] ** -0.5).astype(jnp.bfloat16)
    labels = jax.random.randint(ky, (p["tokens"],), 0, p["vocab"]).at[::5].set(-100)
    return hidden, weight, labels


def _sides(half):
    """{name: (forward, forward + backward)} of hidden, weight, labels."""
    import jax

    pallas, xla = half.pallas, half.jax_reference.linear_cross_entropy_xla

    def ours_fwd(h, w, y):  # the loss alone: what a call needing no gradient runs (visible_kernel)
        return pallas.linear_cross_entropy_loss(h, w, y)

    def ours_step(h, w, y):
        loss, lse, dh = pallas.linear_cross_entropy(h, w, y)
        return (
            loss,
            *pallas.linear_cross_entropy_backward(h, w, y, loss, lse, dh, jax.numpy.ones_like(loss)),
        )

    def xla_step(h, w, y):
        loss, grads = jax.value_and_grad(xla, argnums=(0, 1))(h, w, y)
        return (loss, *grads)

    return {"ours": (ours_fwd, ours_step), "xla": (xla, xla_step)}


def _jax_section(ps: list[dict], write, rounds: int) -> None:
    from tpu_kernels.chip import load, measure

    sides = _sides(load.family("linear_cross_entropy"))  # torch-free, as the chip runner loads it
    for idx, p in enumerate(ps):
        args = _inputs(p, idx)
        unit = 2.0 * p["tokens"] * p["d"] * p["vocab"]  # one [tokens, d] x [d, vocabulary] matmul
        for what, pick, work in (("forward+backward", 1, 3 * unit), ("forward", 0, unit)):
            row = {"section": "jax", "id": f"linear_cross_entropy/{what}/{_tag(p)}", "point": p, "what": what}
            outs, times = {}, {}
            for name, fns in sides.items():
                compiled, _, err = measure.compile_fn(fns[pick], args)
                if err:
                    row[f"{name}_error"] = err
                    continue
                try:
                    times[name] = measure.timed(compiled, args, rounds=rounds)
                    outs[name] = compiled(*args)
                except Exception as e:  # an out-of-memory at run time is a verdict too
                    row[f"{name}_error"] = measure.error_text(e)
                    continue
                row[f"{name}_us"] = round(times[name] * 1e6, 1)
                row[f"{name}_spread"] = None if times[name].spread is None else round(times[name].spread, 3)
                row[f"{name}_tflops"] = round(work / times[name] / 1e12, 1)  # the unfused path's flops
            if len(times) == 2:
                row["vs_xla"] = round(times["xla"] / times["ours"], 3)
                mine = outs["ours"] if isinstance(outs["ours"], tuple) else (outs["ours"],)
                theirs = outs["xla"] if isinstance(outs["xla"], tuple) else (outs["xla"],)
                row["err"] = [measure.normwise(a, np.asarray(b, np.float64)) for a, b in zip(mine, theirs)]
            write(row)
            outs.clear()


def _blocks_section(ps: list[dict], write, rounds: int) -> None:
    """Each kernel alone (the forward; the backward from the forward's residuals) at each of
    BLOCKS: what the defaults (pallas.FORWARD_BLOCKS, BACKWARD_BLOCKS) leave on the table."""
    import jax.numpy as jnp

    from tpu_kernels.chip import load, measure

    pallas = load.family("linear_cross_entropy").pallas
    for idx, p in enumerate(ps):
        h, w, y = _inputs(p, idx)
        _, lse, dh = pallas.linear_cross_entropy(h, w, y)
        one = jnp.ones((), h.dtype)
        for bt, bv in (None, None), *BLOCKS:
            row = {
                "section": "blocks",
                "id": f"linear_cross_entropy/blocks/{_tag(p)}/{bt}x{bv}",
                "point": p,
                "block_t": bt,
                "block_v": bv,
            }
            kw = {"block_t": bt, "block_v": bv}
            for what, fn, args in (
                ("forward", lambda h, w, y, kw=kw: pallas.linear_cross_entropy(h, w, y, **kw), (h, w, y)),
                (
                    "backward",
                    lambda h, w, y, lse, dh, g, kw=kw: pallas.linear_cross_entropy_backward(
                        h, w, y, g, lse, dh, g, **kw
                    )[1],
                    (h, w, y, lse, dh, one),
                ),
            ):
                compiled, _, err = measure.compile_fn(fn, args)
                if err:
                    row[f"{what}_error"] = err[:200]
                    continue
                t = measure.timed(compiled, args, rounds=rounds)
                row[f"{what}_us"] = round(t * 1e6, 1)
                row[f"{what}_tflops"] = round(4.0 * p["tokens"] * p["d"] * p["vocab"] / t / 1e12, 1)
            write(row)


def _memory_child(model: str, side: str) -> dict:
    """One forward + backward of `side` at `model`'s FIXED point, in this process: its peak."""
    import jax

    from tpu_kernels.chip import load

    p = next(q for q in points() if q["model"] == model)
    step = jax.jit(_sides(load.family("linear_cross_entropy"))[side][1])
    args = jax.block_until_ready(_inputs(p, 0))
    dev = jax.devices()[0]
    if dev.memory_stats() is None:  # the CPU keeps none
        return {"error": f"{dev.platform} reports no memory stats"}
    before = dev.memory_stats()["bytes_in_use"]
    compiled = step.lower(*args).compile()
    try:
        jax.block_until_ready(compiled(*args))
    except Exception as e:
        from tpu_kernels.chip import measure

        return {"error": measure.error_text(e), "inputs_bytes": before}
    stats = dev.memory_stats()
    analysis = compiled.memory_analysis()
    return {
        "inputs_bytes": before,
        "peak_bytes": stats["peak_bytes_in_use"],
        "xla_temp_bytes": getattr(analysis, "temp_size_in_bytes", None),
        "xla_output_bytes": getattr(analysis, "output_size_in_bytes", None),
    }


def _memory_section(write) -> None:
    for model in MEMORY:
        p = next(q for q in points() if q["model"] == model)
        row = {"section": "memory", "id": f"linear_cross_entropy/memory/{_tag(p)}", "point": p}
        for side in ("ours", "xla"):
            cmd = [sys.executable, __file__, "--memory-child", f"{model}:{side}"]
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=90, env=os.environ)
                lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
                row[side] = json.loads(lines[-1]) if lines else {"error": done.stderr[-400:]}
            except Exception as e:  # recorded, not raised
                row[side] = {"error": f"{type(e).__name__}: {e}"[:400]}
        a, b = row["ours"].get("peak_bytes"), row["xla"].get("peak_bytes")
        if a and b:
            row["peak_ratio"] = round(a / b, 3)
            extra_a, extra_b = a - row["ours"]["inputs_bytes"], b - row["xla"]["inputs_bytes"]
            row["above_inputs_ratio"] = round(extra_a / extra_b, 3) if extra_b > 0 else None
        write(row)


def _torch_section(ps: list[dict], write, rounds: int) -> None:
    import torch
    import torch.nn.functional as F

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from torch_on_tpu import per_call_us, read_first

    from tpu_kernels.kernels import linear_cross_entropy

    dev = torch.device("tpu")

    def unfused(h, w, y):
        return F.cross_entropy(h @ w.T, y)

    for idx, p in enumerate(ps):
        torch.manual_seed(idx)
        hidden = torch.randn(p["tokens"], p["d"], dtype=torch.bfloat16).to(dev)
        weight = (torch.randn(p["vocab"], p["d"]) * p["d"] ** -0.5).to(torch.bfloat16).to(dev)
        labels = torch.randint(0, p["vocab"], (p["tokens"],))
        labels[::5] = -100
        labels = labels.to(dev)
        row = {"section": "torch", "id": f"linear_cross_entropy/forward+backward/{_tag(p)}", "point": p}
        n = max(2, min(10, int(0.5 / max(6 * p["tokens"] * p["d"] * p["vocab"] / 150e12, 1e-5))))
        results = {}
        for name, fn in (("ours", linear_cross_entropy), ("torch_tpu_unfused", unfused)):
            leaves = [
                hidden.detach().clone().requires_grad_(True),
                weight.detach().clone().requires_grad_(True),
            ]

            def step(fn=fn, leaves=leaves, labels=labels):
                for x in leaves:
                    x.grad = None
                loss = fn(*leaves, labels)
                loss.backward()
                return [loss.detach(), leaves[0].grad, leaves[1].grad]

            try:
                row[f"{name}_us"] = round(per_call_us(step, n=n, rounds=rounds, settle=read_first), 1)
                results[name] = [t.float().cpu() for t in step()]
            except Exception as e:  # recorded, not raised
                row[f"{name}_error"] = f"{type(e).__name__}: {e}"[:600]
            del leaves
        if "ours_us" in row and "torch_tpu_unfused_us" in row:
            row["vs_torch_tpu_unfused"] = round(row["torch_tpu_unfused_us"] / row["ours_us"], 3)
        if len(results) == 2:
            row["err"] = [
                float((a.double() - b.double()).norm() / b.double().norm())
                for a, b in zip(results["ours"], results["torch_tpu_unfused"])
            ]
        write(row)


# ---- the record's tables (docs/performance.md, "The fused LM head and loss") -----------------


def _gib(n: float | None) -> str:
    return "-" if n is None else f"{n / 2**30:.2f} GiB" if n >= 2**28 else f"{n / 2**20:.1f} MiB"


def _last(record: dict, section: str) -> dict:
    return [r for r in record["runs"] if r["section"] == section][-1]


def summary(record: dict) -> str:
    """Markdown: the JAX half against XLA's unfused loss per point (forward + backward, and
    forward), the kernels alone at other blocks, each side's memory, the torch op against
    torch_tpu's unfused loss, and the 20-step training run's two loss curves."""
    rows = {(r["id"].split("/", 2)[2], r["what"]): r for r in _last(record, "jax")["rows"]}
    torch_rows = {r["id"].split("/", 2)[2]: r for r in _last(record, "torch")["rows"]}

    def cell(r: dict | None, base: str) -> str:
        if r is None or "ours_us" not in r:
            return "-"
        if f"{base}_us" in r:
            return f"{r['ours_us'] / 1e3:.1f} ms, **{r[f'vs_{base}']:.2f}x**"
        return f"{r['ours_us'] / 1e3:.1f} ms; unfused: out of memory"

    lines = [
        "| point [tokens, d] x vocabulary | JAX forward + backward | JAX forward: the loss alone | torch forward + backward |",
        "|---|---|---|---|",
    ]
    for p in record["points"]:
        tag = _tag(p)
        lines.append(
            f"| {tag} | {cell(rows.get((tag, 'forward+backward')), 'xla')} | {cell(rows.get((tag, 'forward')), 'xla')} "
            f"| {cell(torch_rows.get(tag), 'torch_tpu_unfused')} |"
        )
    blocks = _last(record, "blocks")["rows"]
    lines += ["", "| point | blocks (t x v) | forward | backward |", "|---|---|---|---|"]
    for r in blocks:
        name = "first default" if r["block_t"] is None else f"{r['block_t']} x {r['block_v']}"
        cells = [
            f"{r[f'{w}_tflops']} TF/s" if f"{w}_tflops" in r else "VMEM exceeded"
            for w in ("forward", "backward")
        ]
        lines.append(f"| {_tag(r['point'])} | {name} | {cells[0]} | {cells[1]} |")
    lines += [
        "",
        "| point | ours: temporaries | unfused: temporaries | outputs (each side) |",
        "|---|---|---|---|",
    ]
    for r in _last(record, "memory")["rows"]:
        ours, xla = r["ours"], r["xla"]
        lines.append(
            f"| {_tag(r['point'])} | {_gib(ours.get('xla_temp_bytes'))} | {_gib(xla.get('xla_temp_bytes'))} "
            f"| {_gib(ours.get('xla_output_bytes'))} |"
        )
    train = record["train"]
    a, b = train["hf_eager"], train["tpu_kernels"]
    steady = lambda run: sum(x["seconds"] for x in run[2:]) / max(len(run) - 2, 1)  # noqa: E731
    lines += [
        "",
        "| 20 steps, small Llama, bf16 | loss at step 0 | at step 19 | step time (steps 2-19) |",
        "|---|---|---|---|",
        f"| Hugging Face (eager attention, unfused loss) | {a[0]['loss']:.4f} | {a[-1]['loss']:.4f} | {steady(a) * 1e3:.0f} ms |",
        f"| shipped attention and loss | {b[0]['loss']:.4f} | {b[-1]['loss']:.4f} | {steady(b) * 1e3:.0f} ms |",
        "",
        f"Largest loss difference over the 20 steps: {train['max_abs_loss_difference']:.4f}.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--memory-child"]:
        model, side = argv[1].split(":")
        print(json.dumps(_memory_child(model, side)), flush=True)
        return 0
    ap = probes.arguments(__doc__, "chip_linear_cross_entropy.jsonl", SECTIONS)
    ap.add_argument("--seed", type=int, default=SEED)
    args = ap.parse_args(argv)
    if args.interpret:
        probes.use_interpreter()
    ps = points(args.seed)
    if args.quick:  # the machinery at CPU sizes
        ps = [dict(p, tokens=64, d=128, vocab=1000) for p in ps[:2]]
    only = [s for s in args.only.split(",") if not (args.interpret and s in ("torch", "memory"))]
    rounds = 2 if args.quick else 3
    start = time.time()
    with probes.lines(args.out, shown=400) as write:
        write({"section": "meta", "seed": args.seed, "points": ps, "started": start})
        if "memory" in only:  # first: each side's process needs the chip, which this one then holds
            _memory_section(write)
        if "jax" in only:
            _jax_section(ps, write, rounds)
        if "blocks" in only:
            _blocks_section([ps[1], ps[5]] if len(ps) > 5 else ps[:1], write, rounds)
        if "torch" in only:
            _torch_section(ps, write, rounds)
        write({"section": "end", "seconds": round(time.time() - start, 1)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
