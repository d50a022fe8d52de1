"""Shapes nobody chose: the chip runner's points drawn at run time from public model configs.

The grid (grid.py) holds shapes its authors picked, and defaults tuned on it can fit them
alone. `draw(seed)` instead draws every point from `MODELS` (public configs: hidden width, FFN
width, heads, kv heads, head_dim, vocabulary) and a token count, with a seed the record keeps,
so a CPU test rebuilds the whole draw from the record (tests/test_chip_drawn.py):

- matmuls: the q projection [T, d] @ [d, heads*hd], kv [T, d] @ [d, 2*kv*hd], FFN up
  [T, d] @ [d, ffn], down [T, ffn] @ [ffn, d], and the LM head [T, d] @ [d, vocab]; T a decode
  batch (1-256) or a prefill (512-16384), bf16 or float32;
- rmsnorm over [T, d] and softmax over [T, vocab], forward and backward;
- the flash-attention template over [1, heads, T, hd], causal, forward and forward + backward;
- `layers(seed)`: a decoder layer at three drawn configs (tokens, widths and heads of each);
- `tune_sample(seed)`: the first draws of each kind (`TUNE_SAMPLE`), each swept over its op's
  candidate configs (chip/tune.py), for the tuner's prediction on shapes it was not fitted to.

Sizes the chip cannot hold or time in the run's budget are cut the same way every time, and
the row says how (`cut`): a point's flops at most `MAX_FLOPS` (fewer tokens), an operand at
most `MAX_OPERAND` bytes (an LM head's vocabulary split as tensor parallelism splits it: the
`tp` ways), an attention point at most `ATTN_HEADS` heads and `ATTN_SEQ` tokens.

`summary(rows)` gives each kernel's distribution against its baseline (min, p10, median) and
the worst points by name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from tpu_kernels.chip import grid, load, tune
from tpu_kernels.chip.point import Point


@dataclass(frozen=True)
class Model:
    name: str
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int


# Public configs (each model's config.json on the Hugging Face Hub).
MODELS = (
    Model("llama-3-8b", 4096, 14336, 32, 8, 128, 128256),
    Model("llama-3-70b", 8192, 28672, 64, 8, 128, 128256),
    Model("llama-3.2-1b", 2048, 8192, 32, 8, 64, 128256),
    Model("llama-3.2-3b", 3072, 8192, 24, 8, 128, 128256),
    Model("llama-2-7b", 4096, 11008, 32, 32, 128, 32000),
    Model("llama-2-13b", 5120, 13824, 40, 40, 128, 32000),
    Model("mistral-7b", 4096, 14336, 32, 8, 128, 32000),
    Model("mistral-nemo-12b", 5120, 14336, 32, 8, 128, 131072),
    Model("qwen2-7b", 3584, 18944, 28, 4, 128, 152064),
    Model("qwen2.5-1.5b", 1536, 8960, 12, 2, 128, 151936),
    Model("qwen2.5-14b", 5120, 13824, 40, 8, 128, 152064),
    Model("qwen2.5-32b", 5120, 27648, 40, 8, 128, 152064),
    Model("gemma-2-2b", 2304, 9216, 8, 4, 256, 256000),
    Model("gemma-2-9b", 3584, 14336, 16, 8, 256, 256000),
    Model("gemma-7b", 3072, 24576, 16, 16, 256, 256000),
)

TINY = Model("tiny", 256, 384, 2, 1, 128, 1000)
"""The model of a quick (CPU interpreter) run: the draw's first point of each kind at these
widths and at most 64 tokens, so the section's machinery runs in seconds."""


ROLES = ("q_proj", "kv_proj", "ffn_up", "ffn_down", "lm_head")
DECODE, PREFILL = (1, 256), (512, 16384)
MAX_FLOPS = 2e12  # a point's work: milliseconds at a v5e's bf16 peak, not seconds
MAX_OPERAND = 1 << 30  # bytes of one input (the runner keeps four copies of a point's inputs)
ATTN_HEADS, ATTN_SEQ = 8, 8192  # XLA's attention holds [heads, T, T] scores
COUNTS = {"matmul": 42, "rows": 8, "softmax": 6, "attention": 6}
"""Draws per kind: each matmul draw is one point, each rmsnorm, softmax and attention draw two
(forward, and backward or forward + backward): 42 + 16 + 12 + 12 = 82 points."""


def _tokens(rng: np.random.Generator, decode: bool) -> int:
    lo, hi = DECODE if decode else PREFILL
    return int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))


def _matmul_dims(model: Model, role: str) -> tuple[int, int]:
    d, hd = model.hidden, model.head_dim
    return {
        "q_proj": (d, model.heads * hd),
        "kv_proj": (d, 2 * model.kv_heads * hd),
        "ffn_up": (d, model.ffn),
        "ffn_down": (model.ffn, d),
        "lm_head": (d, model.vocab),
    }[role]


@dataclass(frozen=True)
class Draw:
    """One drawn point, before the cuts: what a model would run."""

    kind: str  # "matmul", "rows", "softmax", "attention"
    model: str
    role: str  # a matmul's role, "rmsnorm", "softmax", "attention"
    tokens: int
    dtype: str


def draws(seed: int) -> list[Draw]:
    """The draw of `seed`: `COUNTS` draws per kind, models and token counts uniform (token counts
    log-uniform in their range), matmuls decode 40% of the time and bfloat16 75%."""
    rng = np.random.default_rng(seed)
    out = []
    for kind, count in COUNTS.items():
        for _ in range(count):
            model = MODELS[int(rng.integers(len(MODELS)))]
            if kind == "matmul":
                role = ROLES[int(rng.integers(len(ROLES)))]
                decode = bool(rng.random() < 0.4)
                dtype = "bf16" if rng.random() < 0.75 else "f32"
            else:
                role = "rmsnorm" if kind == "rows" else kind
                decode = kind == "rows" and bool(rng.random() < 0.3)  # decode rows: rmsnorm only
                dtype = "bf16" if rng.random() < 0.6 else "f32"
            out.append(Draw(kind, model.name, role, _tokens(rng, decode), dtype))
    return out


def _model(name: str) -> Model:
    return next(m for m in (*MODELS, TINY) if m.name == name)


def shape_of(d: Draw) -> tuple[tuple, dict[str, Any]]:
    """A draw's shape after the cuts, and the cuts made (`cut`: empty when none)."""
    m = _model(d.model)
    it = 2 if d.dtype == "bf16" else 4
    cut: dict[str, Any] = {}
    if d.kind == "matmul":
        k, n = _matmul_dims(m, d.role)
        tp = 1
        while k * n * it / tp > MAX_OPERAND:
            tp *= 2
        if tp > 1:
            n, cut["tp"] = -(-n // tp), tp
        t = d.tokens
        if 2 * t * k * n > MAX_FLOPS:
            t = int(MAX_FLOPS // (2 * k * n))
        t = min(t, MAX_OPERAND // (k * it))
        if t != d.tokens:
            cut["tokens"] = t
        return (t, k, n), cut
    if d.kind == "rows":
        return (d.tokens, m.hidden), cut
    if d.kind == "softmax":
        rows = min(d.tokens, (MAX_OPERAND // 4) // (m.vocab * it))
        if rows != d.tokens:
            cut["tokens"] = rows
        return (rows, m.vocab), cut
    heads, seq = min(m.heads, ATTN_HEADS), min(d.tokens, ATTN_SEQ)
    seq = max(128, seq // 128 * 128)  # the template's blocks tile the sequence
    if heads != m.heads:
        cut["heads"] = heads
    if seq != d.tokens:
        cut["tokens"] = seq
    return (1, heads, seq, m.head_dim), cut


def build(seed: int, statics: dict | None = None, quick: bool = False) -> list[Point]:
    """The points of `draws(seed)`, each id prefixed with its draw's index, model, role and drawn
    tokens, in draw order; each point's `drawn` holds those and the cuts, for its row."""
    statics = statics or {}
    mm = load.family("matmul")
    out = []
    picked = list(enumerate(draws(seed)))
    if quick:
        firsts = {}
        for i, d in picked:
            firsts.setdefault(d.kind, (i, Draw(d.kind, TINY.name, d.role, min(d.tokens, 64), d.dtype)))
        picked = list(firsts.values())
    for i, d in picked:
        shape, cut = shape_of(d)
        if d.kind == "matmul":
            made = [mm.chip.point(mm.pallas.matmul, {"xla": mm.jax_reference.matmul_jax}, "matmul", *shape,
                                        d.dtype, statics.get("matmul", {}), section="drawn")]
        elif d.kind in ("rows", "softmax"):
            family = d.role
            made = grid.family_points(family, [shape], (d.dtype,), statics.get(family, {}))
        else:
            made = grid.attention_points(load.template("flash_attention"), [shape], (d.dtype,), (True,),
                                           statics.get("flash_attention", {}))
        for p in made:
            p.id = f"drawn{i}/{d.model}/{d.role}/T={d.tokens}/" + p.id
            p.section = "drawn"
            p.statics = dict(p.statics)
            p.note = "; ".join(filter(None, [p.note, f"cut {cut}" if cut else ""]))
            p.drawn = {"seed": seed, "draw": i, "model": d.model, "role": d.role, "tokens_drawn": d.tokens,
                       "cut": cut}
            out.append(p)
    return out


def layers(seed: int, count: int = 3) -> list[dict[str, Any]]:
    """Decoder-layer dims (chip/layer.py: MHA at the model's query heads) of `count` configs drawn
    from the models whose head_dim is 128, at a prefill of 1024-4096 tokens (a multiple of 512)."""
    rng = np.random.default_rng(seed + 1)
    pool = [m for m in MODELS if m.head_dim == 128]
    chosen = rng.choice(len(pool), size=count, replace=False)
    out = []
    for i in chosen:
        m = pool[int(i)]
        tokens = 512 * int(rng.integers(2, 9))
        out.append(dict(tokens=tokens, d=m.hidden, heads=m.heads, head_dim=m.head_dim, ffn=m.ffn, model=m.name))
    return out


TUNE_SAMPLE = {"matmul": 6, "rows": 2, "softmax": 2, "attention": 2}
"""Groups per kind of `tune_sample`: 12 shapes, so the tuner's goal (its choice near the measured
best at 90% of groups: bench/chip_tuning.py's GOAL) allows one miss."""


def tune_sample(seed: int, quick: bool = False) -> list[tuple[str, list[Point]]]:
    """(group label, candidate points) for the first `TUNE_SAMPLE` draws of each kind of
    `draws(seed)` with distinct shapes (after the cuts) and more than one candidate config, in
    draw order: each swept over its op's candidates as the tune section sweeps the grid's shapes
    (chip/tune.py). A label is the draw's prefix and the sweep's own label; quick: one group per
    kind at `TINY`'s widths (the machinery only: a tiny sweep may have one candidate)."""
    counts = {kind: 1 if quick else n for kind, n in TUNE_SAMPLE.items()}
    seen: set[tuple] = set()
    groups = []
    for i, d in enumerate(draws(seed)):
        if quick:
            d = Draw(d.kind, TINY.name, d.role, min(d.tokens, 64), d.dtype)
        shape, cut = shape_of(d)
        key = (d.kind, d.role if d.kind != "matmul" else "", shape, d.dtype)
        if counts[d.kind] == 0 or key in seen:
            continue
        seen.add(key)
        if d.kind == "matmul":
            swept = tune.matmul_sweep([(*shape, d.dtype)])
        elif d.kind in ("rows", "softmax"):
            swept = tune.row_sweep([(d.role, *shape, d.dtype)])
        else:
            swept = tune.attention_sweep([(*shape, True)], d.dtype)
        if not quick and any(len({repr(p.statics) for p in cands}) < 2 for _, cands in swept):
            continue  # one candidate (a few rows, one block): nothing for the tuner to choose
        counts[d.kind] -= 1
        for label, cands in swept:
            for p in cands:
                p.section = "drawn_tune"
                p.note = "; ".join(filter(None, [p.note, f"cut {cut}" if cut else ""]))
            groups.append((f"drawn{i}/{d.model}/{d.role}/T={d.tokens}/{label}", cands))
    return groups


def _baseline(row: dict[str, Any]) -> str:
    return "jax_flash" if row["kernel"].startswith("template.flash_attention") else "xla"


def _least(speeds) -> float | None:
    values = [s for s in speeds if s]
    return min(values) if values else None


def summary(rows: list[dict[str, Any]], worst: int = 3) -> dict[str, dict[str, Any]]:
    """Per kernel (and dtype): how many points, their speed against the baseline (XLA's; JAX's
    Pallas flash attention for the template) as min, p10 and median, the worst points by id,
    the points where the kernel failed to compile or run (`failed`), and those it ran where the
    baseline did not (`unmatched`). Apart: the least speed over the points that are not
    dispatch-bound (`min_kernel_bound`: their calls are the kernels' own time), and over the
    dispatch-bound ones timed as calls in one program (`min_in_program`: each side's time without
    the per-call dispatch, chip/run.py); None where there are none."""
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(f"{r['kernel']}/{r['dtype']}", []).append(r)
    out = {}
    for key, group in sorted(by.items()):
        base = _baseline(group[0])
        speeds = sorted(((r[f"speed_vs_{base}"], r["id"]) for r in group if r.get(f"speed_vs_{base}")),
                        key=lambda s: s[0])  # ties in draw order
        failed = [r["id"] for r in group if not r["pallas"].get("time_s")]
        unmatched = [r["id"] for r in group if r["pallas"].get("time_s") and not r.get(f"speed_vs_{base}")]
        values = np.array([s for s, _ in speeds]) if speeds else np.array([np.nan])
        out[key] = {
            "points": len(group),
            "baseline": base,
            "min": float(np.min(values)),
            "p10": float(np.percentile(values, 10)),
            "median": float(np.median(values)),
            "worst": [{"id": i, "speed": round(s, 3)} for s, i in speeds[:worst]],
            "failed": failed,
            "unmatched": unmatched,
            "min_kernel_bound": _least(r.get(f"speed_vs_{base}") for r in group if not r.get("dispatch_bound")),
            "min_in_program": _least(r.get(f"speed_in_program_vs_{base}") for r in group if r.get("dispatch_bound")),
        }
    return out


def table(rows: list[dict[str, Any]]) -> str:
    """`summary(rows)` as a markdown table, one line per kernel and dtype."""
    lines = ["| kernel | points | against | min | p10 | median | min, not dispatch-bound | min, dispatch-bound "
             "in one program | worst point | kernel failed | baseline failed |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for key, s in summary(rows).items():
        worst = s["worst"][0]["id"].split("/", 1)[1] if s["worst"] else ""
        apart = " | ".join("-" if v is None else f"{v:.2f}x" for v in (s["min_kernel_bound"], s["min_in_program"]))
        lines.append(f"| {key} | {s['points']} | {s['baseline']} | {s['min']:.2f}x | {s['p10']:.2f}x | "
                     f"{s['median']:.2f}x | {apart} | {worst} | {len(s['failed'])} | {len(s['unmatched'])} |")
    return "\n".join(lines)


__all__ = ["COUNTS", "MODELS", "TUNE_SAMPLE", "Draw", "Model", "build", "draws", "layers", "shape_of", "summary", "table",
           "tune_sample"]
