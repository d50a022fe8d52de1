"""Where the shipped matmul's remaining gaps to XLA on a TPU v5e come from: a probe, JAX alone.

Three questions (the grid's record, bench/reports/chip_v5e.json, has the misses):

  decode   At M = 16 and 64 (16x4096x14336, 64x14336x4096, bf16) XLA's dot took ~120 us, a read
           of its 117 MB weight at ~950 GB/s: above the v5e's 819 GB/s HBM peak. Is part of the
           weight not read from HBM on each call, when every call gets the same weight? Each
           function is timed twice: the same inputs on every call, and cycling through `ROTATE`
           distinct copies (as a model's layers do), and the compiled module's text is searched
           for XLA's cross-program prefetch (an input prefetched into on-chip memory).
  f32      float32 at 4096^3: the kernel's accumulator kept in the float32 output block (no
           scratch, no copy), larger blocks it then fits, and the blocks cast to bf16 by the
           kernel before its dot; and "high" as a three-pass bf16 product written in the kernel
           (a = a_hi + a_lo, b likewise; a_hi b_hi + a_hi b_lo + a_lo b_hi), against HIGHEST
           (what "high" is traced as now) and XLA's dot at HIGH.
  blocks   bf16 at the projection shape 8192x4096x1024 and at 4096^3 and 8192x4096x4096: blocks
           past the tuning space (block_m 2048, block_k up to the whole K).

Each time: n calls, one wait, the minimum of 7 rounds (tpu_kernels.chip.measure); the error is
normwise against a float64 product of the first rows, computed on the host. Writes JSON lines to
$OUT/matmul_probe.jsonl (or --out).

    python3 bench/chip_matmul_probe.py [--only decode,f32,blocks] [--out FILE] [--quick --interpret]
"""

from __future__ import annotations

import functools
import itertools
import re
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tpu_kernels.chip import (
    load,  # noqa: E402
    measure,  # noqa: E402
    probes,  # noqa: E402
)

shipped = load.family("matmul").pallas  # torch-free: the chip has no torch

ROTATE = 4
CHECK_ROWS = 256
LIMIT = 100 * 2**20


def mm(a, b, bm: int, bn: int, bk: int, *, acc: str = "scratch", mode: str = "native"):
    """A (bm, bn, bk) tiled a @ b. acc: "scratch" (a float32 VMEM buffer, as shipped) or "out"
    (accumulate in the float32 output block, resident across k). mode: "native" (the dot at
    the ambient precision), "cast" (blocks cast to bf16 first), "x3" (three bf16 passes),
    "highest" (Precision.HIGHEST)."""
    m, k = a.shape
    n = b.shape[1]
    bm, bn, bk = min(bm, m), min(bn, n), min(bk, k)
    grid = (m // bm, n // bn, k // bk)
    nk = grid[2]

    def split(x):
        hi = x.astype(jnp.bfloat16)
        return hi, (x - hi.astype(jnp.float32)).astype(jnp.bfloat16)

    def product(x, y):
        f = functools.partial(jnp.dot, preferred_element_type=jnp.float32)
        if mode == "cast":
            return f(x.astype(jnp.bfloat16), y.astype(jnp.bfloat16))
        if mode == "x3":
            (xh, xl), (yh, yl) = split(x), split(y)
            return f(xl, yh) + f(xh, yl) + f(xh, yh)
        if mode == "highest":
            return f(x, y, precision=jax.lax.Precision.HIGHEST)
        return f(x, y)

    def kernel(a_ref, b_ref, o_ref, *scratch):
        target = o_ref if acc == "out" else scratch[0]
        kk = pl.program_id(2)

        @pl.when(kk == 0)
        def _():
            target[...] = jnp.zeros_like(target)

        target[...] += product(a_ref[...], b_ref[...])
        if acc != "out":

            @pl.when(kk == nk - 1)
            def _():
                o_ref[...] = target[...].astype(o_ref.dtype)

    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), a.dtype),
        grid=grid,
        in_specs=[
            pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),
            pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j)),
        ],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
        scratch_shapes=[] if acc == "out" else [pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary"), vmem_limit_bytes=LIMIT
        ),
    )(a, b)


def xla(precision=None):
    return lambda a, b: jnp.dot(a, b, precision=precision, preferred_element_type=a.dtype)


def interpret() -> bool:
    return jax.default_backend() != "tpu"


def time_cycle(compiled, arg_sets, rounds: int) -> float:
    """Seconds per call, cycling through arg_sets (n calls, one wait, min of rounds)."""
    jax.block_until_ready([compiled(*s) for s in arg_sets])
    start = time.perf_counter()
    jax.block_until_ready(compiled(*arg_sets[0]))
    n = measure.calls_for(time.perf_counter() - start)
    n = max(len(arg_sets), n - n % len(arg_sets))
    best = float("inf")
    for _ in range(rounds):
        cyc = itertools.cycle(arg_sets)
        start = time.perf_counter()
        for _ in range(n):
            out = compiled(*next(cyc))
        jax.block_until_ready(out)
        best = min(best, (time.perf_counter() - start) / n)
    return best


def inputs(m, k, n, dtype, copies: int, seed: int = 0):
    keys = jax.random.split(jax.random.key(seed), 2 * copies)
    return [
        (jax.random.normal(keys[2 * i], (m, k), dtype), jax.random.normal(keys[2 * i + 1], (k, n), dtype))
        for i in range(copies)
    ]


def error(out, a, b) -> float:
    rows = min(CHECK_ROWS, a.shape[0])
    ref = np.asarray(a[:rows], np.float64) @ np.asarray(b, np.float64)
    y = np.asarray(out[:rows], np.float64)
    return float(np.linalg.norm(y - ref) / np.linalg.norm(ref))


def probe(tag: str, fn, sets, *, rotate: bool, hlo: bool = False) -> dict:
    a, b = sets[0]
    m, k = a.shape
    n = b.shape[1]
    row = {"tag": tag, "shape": [m, k, n], "dtype": str(a.dtype)}
    start = time.perf_counter()
    try:
        compiled = jax.jit(fn).lower(a, b).compile()
        out = jax.block_until_ready(compiled(a, b))
        row["err"] = error(out, a, b)
        rounds = 1 if interpret() else 7
        t = measure.timed(compiled, [a, b], rounds=rounds)
        row.update(
            us=round(t * 1e6, 1),
            tflops=round(2 * m * n * k / t / 1e12, 1),
            weight_gbps=round(b.size * b.dtype.itemsize / t / 1e9),
        )
        if rotate:
            t = time_cycle(compiled, sets, rounds)
            row.update(
                us_rotated=round(t * 1e6, 1), weight_gbps_rotated=round(b.size * b.dtype.itemsize / t / 1e9)
            )
        if hlo:
            text = compiled.as_text() or ""
            row["cross_program_prefetch"] = sorted(set(re.findall(r"cross_program_prefetch[^,}\n]*", text)))[
                :4
            ]
    except Exception as e:  # a refusal is a result
        row["error"] = measure.error_text(e)[:300]
    row["wall_s"] = round(time.perf_counter() - start, 1)
    return row


def decode(quick: bool):
    shapes = (
        [(16, 1024, 2048, jnp.bfloat16)]
        if quick
        else [
            (16, 4096, 14336, jnp.bfloat16),
            (64, 14336, 4096, jnp.bfloat16),
            (1, 4096, 14336, jnp.bfloat16),
            (64, 4096, 4096, jnp.bfloat16),
            (16, 4096, 14336, jnp.float32),
        ]
    )
    for m, k, n, dtype in shapes:
        sets = inputs(m, k, n, dtype, ROTATE)
        name = f"{m}x{k}x{n} {jnp.dtype(dtype).name}"
        yield probe(f"{name} xla", xla(), sets, rotate=True, hlo=True)
        yield probe(f"{name} shipped", shipped.matmul, sets, rotate=True, hlo=True)
        del sets


def f32(quick: bool):
    m = k = n = 256 if quick else 4096
    sets = inputs(m, k, n, jnp.float32, 1)
    blocks = (
        [(128, 128, 128)]
        if quick
        else [(1024, 1024, 512), (2048, 1024, 256), (2048, 1024, 512), (1024, 2048, 512), (2048, 2048, 256)]
    )
    yield probe(f"f32 {m}^3 xla default", xla(), sets, rotate=False)
    yield probe(f"f32 {m}^3 xla high", xla(jax.lax.Precision.HIGH), sets, rotate=False)
    yield probe(f"f32 {m}^3 xla highest", xla(jax.lax.Precision.HIGHEST), sets, rotate=False)
    yield probe(f"f32 {m}^3 shipped default", shipped.matmul, sets, rotate=False)
    for bm, bn, bk in blocks:
        for acc, mode in (
            ("scratch", "native"),
            ("out", "native"),
            ("out", "cast"),
            ("out", "x3"),
            ("scratch", "x3"),
            ("out", "highest"),
        ):
            if acc == "scratch" and (bm, bn) != (1024, 1024):
                continue
            yield probe(
                f"f32 {m}^3 mm ({bm},{bn},{bk}) acc={acc} {mode}",
                functools.partial(mm, bm=bm, bn=bn, bk=bk, acc=acc, mode=mode),
                sets,
                rotate=False,
            )


def blocks(quick: bool):
    shapes = (
        {(256, 512, 256): [(128, 256, 128), (256, 256, 512)]}
        if quick
        else {
            (8192, 4096, 1024): [
                (1024, 1024, 512),
                (1024, 1024, 1024),
                (2048, 1024, 512),
                (2048, 1024, 1024),
                (1024, 1024, 2048),
                (512, 1024, 4096),
                (2048, 1024, 2048),
                (4096, 1024, 512),
            ],
            (4096, 4096, 4096): [
                (1024, 2048, 512),
                (1024, 2048, 1024),
                (2048, 2048, 512),
                (2048, 1024, 1024),
                (2048, 2048, 256),
            ],
            (8192, 4096, 4096): [
                (1024, 2048, 512),
                (1024, 2048, 1024),
                (2048, 2048, 512),
                (2048, 1024, 1024),
            ],
        }
    )
    for (m, k, n), configs in shapes.items():
        sets = inputs(m, k, n, jnp.bfloat16, 1)
        yield probe(f"bf16 {m}x{k}x{n} xla", xla(), sets, rotate=False)
        yield probe(f"bf16 {m}x{k}x{n} shipped", shipped.matmul, sets, rotate=False)
        for bm, bn, bk in configs:
            yield probe(
                f"bf16 {m}x{k}x{n} mm ({bm},{bn},{bk})",
                functools.partial(mm, bm=bm, bn=bn, bk=bk),
                sets,
                rotate=False,
            )
        del sets


SECTIONS = {"decode": decode, "f32": f32, "blocks": blocks}


def main(argv: list[str] | None = None) -> int:
    args = probes.arguments(__doc__, "matmul_probe.jsonl", SECTIONS).parse_args(argv)
    if args.interpret:
        probes.use_interpreter()
    with probes.lines(args.out) as write:
        for section in args.only.split(","):
            for row in SECTIONS[section](args.quick):
                write({"section": section, **row})
    return 0


if __name__ == "__main__":
    sys.exit(main())
