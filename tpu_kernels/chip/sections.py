"""The chip runner's sections: each returns the rows it adds to the record."""

from __future__ import annotations

import contextlib
import functools
import re
import time
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp

from tpu_kernels.chip import load, run
from tpu_kernels.chip import tune as tuning
from tpu_kernels.chip.grid import points as grid_points
from tpu_kernels.chip.point import SECTIONS as GRID_SECTIONS


@dataclass
class Context:
    peaks: dict | None
    floor_s: float
    rounds: int
    deadline: float
    quick: bool = False
    statics: dict = field(default_factory=dict)
    grid: tuple = GRID_SECTIONS
    tune_only: tuple = ()  # the tuning groups to run (substrings of their labels); all if empty
    only: str = ""  # a regular expression: the grid points and corpus calls whose id matches it, the
    # drawn layers whose model name does (all if empty)
    save: Any = None  # save(rows): write the section's rows so far into the record (a long run keeps them)
    seed: int = 0  # the draw of the `drawn` sections (chip/drawn.py)


def grid(ctx: Context) -> list[dict[str, Any]]:
    pts = grid_points(quick=ctx.quick, sections=ctx.grid, statics=ctx.statics)
    if ctx.only:
        pts = [p for p in pts if re.search(ctx.only, p.id)]
    return run.run_points(pts, peaks=ctx.peaks, floor_s=ctx.floor_s, rounds=ctx.rounds, deadline=ctx.deadline,
                          save=ctx.save)


# ---------------------------------------------------------------- shapes drawn at run time
def drawn(ctx: Context) -> list[dict[str, Any]]:
    """Every point of `drawn.build(ctx.seed)` (chip/drawn.py), each row with its draw."""
    from tpu_kernels.chip import drawn as drawing

    pts = drawing.build(ctx.seed, ctx.statics, quick=ctx.quick)
    if ctx.only:
        pts = [p for p in pts if re.search(ctx.only, p.id)]
    print(f"  seed {ctx.seed}: {len(pts)} points", flush=True)
    rows: list[dict[str, Any]] = []
    if not _run(ctx, pts, [ctx.seed + i for i in range(len(pts))], rows, rounds=ctx.rounds, extra=lambda p: p.drawn):
        print(f"  stopped at the time budget: {len(pts) - len(rows)} points not run", flush=True)
    return rows


def drawn_layer(ctx: Context) -> list[dict[str, Any]]:
    """The decoder layer (chip/layer.py) at `drawn.layers(ctx.seed)`: three drawn model configs
    (those whose model name matches `ctx.only`, if given)."""
    from tpu_kernels.chip import drawn as drawing
    from tpu_kernels.chip import layer as decoder

    dims_list = decoder.shapes(True) if ctx.quick else drawing.layers(ctx.seed)
    rows = []
    for dims in dims_list:
        model = dims.pop("model", "tiny")
        if ctx.only and not re.search(ctx.only, model):
            continue
        for backward in (False, True):
            if time.monotonic() > ctx.deadline:
                print("  stopped at the time budget", flush=True)
                return rows
            with contextlib.suppress(Exception):
                jax.clear_caches()
            row = decoder.measure_layer(dims, backward=backward, rounds=ctx.rounds, floor_s=ctx.floor_s,
                                        statics=ctx.statics)
            row.update(seed=ctx.seed, model=model)
            rows.append(row)
            print(f"  {model} {row['id']:<50} " + "  ".join(f"{k}={v}" for k, v in row.items() if k.endswith("_ms")
                                                            or k.startswith("speed")), flush=True)
            if ctx.save is not None:
                ctx.save(rows)
    return rows


# ---------------------------------------------------------------- float32 matmul precision
PRECISIONS = ("default", "high", "highest")


def _traced(fn, setting: str, how: str):
    """`fn` traced at `setting` the toolkit's way (`traced_at`: Pallas kernel bodies at a
    precision Mosaic accepts) or JAX's own (`jax.default_matmul_precision`, what tpu_kernels
    did before: Mosaic refuses a float32 dot at "high", which the record at 453fcf7 shows; the
    matmul kernel's `mosaic_precision.dot` now reads the setting itself and compiles "high" as
    three bf16 passes either way). A new function per setting: JAX caches traces."""
    from tpu_kernels.runtime.mosaic_precision import traced_at

    context = traced_at if how == "traced_at" else jax.default_matmul_precision

    def f(a, b):
        with context(setting):
            return fn(a, b)

    return f


def precision(ctx: Context) -> list[dict[str, Any]]:
    """The shipped matmul in float32 at each matmul-precision setting, against XLA's jnp.matmul
    at the same setting; "high" also the old way (JAX's setting around the whole trace)."""
    mm = load.family("matmul")
    shapes = [(256, 256, 256)] if ctx.quick else [(4096, 4096, 4096)]
    rows = []
    for setting in PRECISIONS:
        for how in ("traced_at", "jax.default_matmul_precision") if setting == "high" else ("traced_at",):
            for m, k, n in shapes:

                def xla(a, b, setting=setting):
                    with jax.default_matmul_precision(setting):
                        return jnp.matmul(a, b, preferred_element_type=jnp.float32)

                kernel = functools.partial(mm.pallas.matmul, **ctx.statics.get("matmul", {}))
                p = load.family("matmul").chip.point(_traced(kernel, setting, how), {"xla": xla}, "matmul", m, k, n, "f32", {},
                                        section="precision")
                p.id = f"matmul/f32[{m},{k},{n}]/precision={setting}/{how}"
                p.note = f"kernel traced under {how}({setting!r}); XLA's jnp.matmul under jax.default_matmul_precision"
                row = run.run_point(p, seed=len(rows), rounds=ctx.rounds, floor_s=ctx.floor_s, peaks=ctx.peaks)
                row.update(precision=setting, traced_with=how)
                rows.append(row)
                print(run.summary(row), flush=True)
    return rows


# ---------------------------------------------------------------- tuning spaces
def tune(ctx: Context) -> list[dict[str, Any]]:
    if ctx.quick:
        groups = tuning.matmul_sweep([(128, 256, 256, "bf16")])[:1]
        groups += tuning.row_sweep([("softmax", 64, 256, "f32")])
        groups += tuning.attention_sweep([(1, 1, 256, 128, True)])
    else:
        groups = tuning.matmul_sweep([(4096, 4096, 4096, "bf16"), (8192, 4096, 14336, "bf16"),
                                      (2048, 2048, 2048, "bf16"), (16, 4096, 14336, "bf16"),
                                      (64, 14336, 4096, "bf16")])
        groups += tuning.attention_sweep([(1, 8, 4096, 128, True), (1, 8, 2048, 128, False)])
        groups += tuning.row_sweep([("rmsnorm", 8192, 4096, "bf16"), ("softmax", 4096, 4096, "f32"),
                                    ("rmsnorm", 8192, 4096, "f32"), ("softmax", 4096, 4096, "bf16"),
                                    ("scale_add", 4096, 4096, "f32"), ("softmax", 512, 32768, "f32"),
                                    ("rmsnorm", 4096, 14336, "bf16")])
        groups += tuning.matmul_sweep([(4096, 4096, 4096, "f32")])
    return _sweeps(ctx, groups)


def drawn_tune(ctx: Context) -> list[dict[str, Any]]:
    """The tuning sweeps of `drawn.tune_sample(ctx.seed)`: each candidate config at shapes the
    tuner's constants were not fitted to (bench/chip_tuning.py --section drawn_tune --held-out
    compares its predictions with them); `ctx.tune_only` picks groups as in `tune`."""
    from tpu_kernels.chip import drawn as drawing

    return _sweeps(ctx, drawing.tune_sample(ctx.seed, quick=ctx.quick), {"seed": ctx.seed})


def _sweeps(ctx: Context, groups: list, extra: dict | None = None) -> list[dict[str, Any]]:
    """Each (label, candidates) group's rows, each row naming its group (and `extra`): the groups
    `ctx.tune_only` names, in its order, until the time budget."""
    if ctx.tune_only:
        groups = [(label, cands) for label, cands in groups if any(s in label for s in ctx.tune_only)]
        groups.sort(key=lambda g: min(i for i, s in enumerate(ctx.tune_only) if s in g[0]))
    rows: list[dict[str, Any]] = []
    for label, cands in groups:
        if not _run(ctx, cands, range(len(cands)), rows, rounds=max(3, ctx.rounds - 2), sweep=True,
                    extra=lambda p, label=label: {"group": label, **(extra or {})}):
            print(f"  stopped at the time budget in {label}", flush=True)
            break
    return rows


def _run(ctx: Context, pts: list, seeds, rows: list[dict[str, Any]], *, rounds: int,
         sweep: bool = False, extra=lambda p: {}) -> bool:
    """Each point's row, with `extra(point)` added, appended to `rows` (saved after each);
    False when the time budget stopped it first. `sweep` (one shape's candidate configs): the
    baselines are timed with the first candidate only, and candidates of one kernel share one
    preparation of inputs (`run.prepared`'s `shared`)."""
    seeds = list(seeds)
    for i, (p, ready, ahead) in enumerate(run.prepared(pts, seeds, shared=sweep)):
        if time.monotonic() > ctx.deadline:
            return False
        row = run.run_point(p, seed=seeds[i], rounds=rounds, floor_s=ctx.floor_s, peaks=ctx.peaks,
                            baselines=not sweep or i == 0, ready=ready, ahead=ahead)
        row.update(extra(p))
        rows.append(row)
        print(run.summary(row), flush=True)
        if ctx.save is not None:
            ctx.save(rows)
    return True


# ---------------------------------------------------------------- the calibration corpus
def corpus(ctx: Context) -> list[dict[str, Any]]:
    from tpu_kernels.chip import corpus as calls

    rows = []
    for c in calls.calls():
        if ctx.only and not re.search(ctx.only, c.id):
            continue
        if time.monotonic() > ctx.deadline:
            print("  stopped at the time budget", flush=True)
            break
        print(f"  {c.id}", end=" ", flush=True)
        rows.append(calls.compile_verdict(c))
        print(f"{'compiles' if rows[-1]['compiles'] else 'REFUSED'} {rows[-1]['compile_s']:.1f} s", flush=True)
        if ctx.save is not None and len(rows) % 25 == 0:
            ctx.save(rows)
    failed = sum(not r["compiles"] for r in rows)
    print(f"  {len(rows)} calls compiled: {len(rows) - failed} compile, {failed} refused", flush=True)
    return rows


# ---------------------------------------------------------------- a decoder layer
def layer(ctx: Context) -> list[dict[str, Any]]:
    from tpu_kernels.chip import layer as decoder

    rows = []
    for dims in decoder.shapes(ctx.quick):
        for backward in (False, True):
            with contextlib.suppress(Exception):
                jax.clear_caches()
            row = decoder.measure_layer(dims, backward=backward, rounds=ctx.rounds, floor_s=ctx.floor_s,
                                  statics=ctx.statics)
            rows.append(row)
            print(f"  {row['id']:<60} " + "  ".join(f"{k}={v}" for k, v in row.items() if k.endswith("_ms")
                                                     or k.startswith("speed") or k.startswith("error")), flush=True)
    return rows


__all__ = ["Context", "corpus", "drawn", "drawn_layer", "drawn_tune", "grid", "layer", "precision", "tune"]
