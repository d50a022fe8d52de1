"""Why the shipped matmul trails XLA's dot at decode shapes on a TPU v5e: a probe of how fast a
Pallas kernel can read the weight.

At M = 16 and 64 (16x4096x14336, 64x14336x4096, bf16) a matmul is the read of its 117 MB
weight. The grid (bench/reports/chip_v5e.json) has the shipped matmul at 0.72-0.73x of
`jnp.dot` there, and its tuning sweep (chip_v5e_tune.json) finds no config within 1.3x. This
script times, on the chip, with JAX alone:

  xla            jnp.dot
  xla colsum     jnp.sum(b, axis=0) in float32: XLA's own streaming read of the weight
  pallas colsum  a Pallas kernel that only sums (bk, bn) blocks of the weight
  mm             the shipped kernel's form (an (M, bk) x (bk, bn) grid with a float32
                 accumulator), at blocks that divide the shape; with pl.Buffered(3) on the
                 weight too (refused by this Mosaic: "Only single (1) and double (2) buffering
                 are supported")
  fullk          one (M, K) x (K, bn) dot per step, no accumulator
  splitk/splitn  the weight's block read as s sub-blocks, each its own input (s copies in flight)

Each time: n calls, one wait, the minimum of 7 rounds (tpu_kernels.chip.measure.timed); the
error is normwise against XLA's dot at "highest". Writes JSON lines to $OUT/decode_probe.jsonl
(or --out). Runs where tpu_kernels.chip runs (docs/devices.md); the record of a v5e run is
bench/reports/chip_v5e_decode_probe.json.

    python3 bench/chip_decode_probe.py [--out FILE] [--quick --interpret]
"""

from __future__ import annotations

import functools
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tpu_kernels.chip import measure, probes  # noqa: E402

SHAPES = [(16, 4096, 14336), (64, 14336, 4096)]
QUICK = [(16, 1024, 2048), (64, 2048, 1024)]  # --quick: the same variants, small (a CPU test)


def _params(semantics: tuple[str, ...]) -> pltpu.CompilerParams:
    return pltpu.CompilerParams(dimension_semantics=semantics, vmem_limit_bytes=100 * 2**20)


def mm(a, b, bn: int, bk: int, buffers: int = 2):
    m, k = a.shape
    n = b.shape[1]
    grid = (n // bn, k // bk)

    def kernel(a_ref, b_ref, o_ref, acc_ref):
        @pl.when(pl.program_id(1) == 0)
        def _():
            acc_ref[...] = jnp.zeros_like(acc_ref)

        acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

        @pl.when(pl.program_id(1) == grid[1] - 1)
        def _():
            o_ref[...] = acc_ref[...].astype(o_ref.dtype)

    extra = {} if buffers == 2 else {"pipeline_mode": pl.Buffered(buffers)}
    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((m, n), a.dtype), grid=grid,
        in_specs=[pl.BlockSpec((m, bk), lambda j, kk: (0, kk)), pl.BlockSpec((bk, bn), lambda j, kk: (kk, j), **extra)],
        out_specs=pl.BlockSpec((m, bn), lambda j, kk: (0, j)),
        scratch_shapes=[pltpu.VMEM((m, bn), jnp.float32)], compiler_params=_params(("parallel", "arbitrary")),
    )(a, b)


def fullk(a, b, bn: int):
    m, k = a.shape
    n = b.shape[1]

    def kernel(a_ref, b_ref, o_ref):
        o_ref[...] = jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32).astype(o_ref.dtype)

    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((m, n), a.dtype), grid=(n // bn,),
        in_specs=[pl.BlockSpec((m, k), lambda j: (0, 0)), pl.BlockSpec((k, bn), lambda j: (0, j))],
        out_specs=pl.BlockSpec((m, bn), lambda j: (0, j)), compiler_params=_params(("parallel",)),
    )(a, b)


def split(a, b, bn: int, bk: int, s: int, axis: str):
    """The weight's (bk, bn) block as s sub-blocks along K ("k") or N ("n"), each its own input."""
    m, k = a.shape
    n = b.shape[1]
    grid = (n // bn, k // bk)
    sk, sn = (bk // s, bn) if axis == "k" else (bk, bn // s)

    def kernel(a_ref, *refs):
        b_refs, o_ref, acc_ref = refs[:s], refs[s], refs[s + 1]

        @pl.when(pl.program_id(1) == 0)
        def _():
            acc_ref[...] = jnp.zeros_like(acc_ref)

        for t in range(s):
            if axis == "k":
                acc_ref[...] += jnp.dot(a_ref[:, t * sk:(t + 1) * sk], b_refs[t][...], preferred_element_type=jnp.float32)
            else:
                acc_ref[:, t * sn:(t + 1) * sn] += jnp.dot(a_ref[...], b_refs[t][...], preferred_element_type=jnp.float32)

        @pl.when(pl.program_id(1) == grid[1] - 1)
        def _():
            o_ref[...] = acc_ref[...].astype(o_ref.dtype)

    if axis == "k":
        specs = [pl.BlockSpec((sk, bn), functools.partial(lambda t, j, kk: (kk * s + t, j), t)) for t in range(s)]
    else:
        specs = [pl.BlockSpec((bk, sn), functools.partial(lambda t, j, kk: (kk, j * s + t), t)) for t in range(s)]
    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((m, n), a.dtype), grid=grid,
        in_specs=[pl.BlockSpec((m, bk), lambda j, kk: (0, kk))] + specs,
        out_specs=pl.BlockSpec((m, bn), lambda j, kk: (0, j)),
        scratch_shapes=[pltpu.VMEM((m, bn), jnp.float32)], compiler_params=_params(("parallel", "arbitrary")),
    )(a, *([b] * s))


def colsum(a, b, bn: int, bk: int):
    k, n = b.shape

    def kernel(b_ref, o_ref):
        @pl.when(pl.program_id(1) == 0)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)

        o_ref[...] += jnp.sum(b_ref[...].astype(jnp.float32).reshape(-1, 8, bn), axis=0)

    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((8, n), jnp.float32), grid=(n // bn, k // bk),
        in_specs=[pl.BlockSpec((bk, bn), lambda j, kk: (kk, j))], out_specs=pl.BlockSpec((8, bn), lambda j, kk: (0, j)),
        compiler_params=_params(("parallel", "arbitrary")),
    )(b)


def variants(m: int, k: int, n: int):
    """(tag, function of (a, b), checked against the dot) at blocks that divide the shape."""
    seen = set()

    def fits(kind: str, bn: int, bk: int) -> bool:
        """Blocks that divide the shape (a grid of n // bn steps would skip the rest), once each."""
        if n % bn or k % bk or (kind, bn, bk) in seen:
            return False
        seen.add((kind, bn, bk))
        return True

    yield "xla", jnp.dot, True
    yield "xla colsum", lambda a, b: jnp.sum(b.astype(jnp.float32), axis=0), False
    for bk, bn in ((512, 2048), (2048, 2048)):
        bn, bk = min(bn, n), min(bk, k)
        if fits("colsum", bn, bk):
            yield f"pallas colsum {bk}x{bn}", functools.partial(colsum, bn=bn, bk=bk), False
    for bn, bk in ((2048, 512), (4096, 512), (n, 256), (2048, 1024), (1024, 2048), (512, 4096), (4096, 256)):
        bn, bk = min(bn, n), min(bk, k)
        if not fits("mm", bn, bk):
            continue
        for buffers in (2, 3):
            yield f"mm ({m},{bn},{bk}) buffers={buffers}", functools.partial(mm, bn=bn, bk=bk, buffers=buffers), True
    for bn in (256, 512, 1024, 2048):
        if fits("fullk", bn, k) and k * bn * 2 * 3 <= 90 * 2**20:
            yield f"fullk bn={bn}", functools.partial(fullk, bn=bn), True
    for bn, bk in ((2048, 512), (2048, 1024), (1024, 1024), (2048, 2048), (512, 2048)):
        if not fits("split", bn, bk):
            continue
        for s in (2, 4, 8):
            for axis in ("k", "n"):
                if (bn // s if axis == "n" else bk // s) >= 128:
                    yield f"split{axis} ({m},{bn},{bk}) s={s}", functools.partial(split, bn=bn, bk=bk, s=s, axis=axis), True


def interpret() -> bool:
    return jax.default_backend() != "tpu"


def probe(a, b, tag: str, fn, checked: bool, ref) -> dict:
    start = time.perf_counter()
    try:
        compiled = jax.jit(fn).lower(a, b).compile()
        out = jax.block_until_ready(compiled(a, b))
        row = {"tag": tag}
        if checked:
            row["err"] = float(jnp.linalg.norm(out.astype(jnp.float32) - ref) / jnp.linalg.norm(ref))
        t = measure.timed(compiled, [a, b], rounds=1 if interpret() else 7)
        row.update(us=round(t * 1e6, 1), gbps=round(b.size * b.dtype.itemsize / t / 1e9))
    except Exception as e:  # a refusal is a result
        row = {"tag": tag, "error": measure.error_text(e)[:300]}
    row["wall_s"] = round(time.perf_counter() - start, 1)
    return row


def main(argv: list[str] | None = None) -> int:
    args = probes.arguments(__doc__, "decode_probe.jsonl").parse_args(argv)
    if args.interpret:
        probes.use_interpreter()
    with probes.lines(args.out) as write:
        for m, k, n in QUICK if args.quick else SHAPES:
            ka, kb = jax.random.split(jax.random.key(0))
            a = jax.random.normal(ka, (m, k), jnp.bfloat16)
            b = jax.random.normal(kb, (k, n), jnp.bfloat16)
            ref = jnp.dot(a, b, preferred_element_type=jnp.float32, precision="highest")
            for tag, fn, checked in variants(m, k, n):
                write({"shape": [m, k, n], **probe(a, b, f"{m}x{k}x{n} {tag}", fn, checked, ref)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
