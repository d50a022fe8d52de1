"""Where the row kernels' last misses on a TPU v5e come from: a probe, JAX alone.

The grid's record (bench/reports/chip_v5e.json, at 0ef1c81) left row points under 75% of HBM
peak or under XLA's speed. Eleven questions, each point checked against float64 on the host:

  blocks   rmsnorm's backward, scale_add and rmsnorm's forward at their miss shapes: the
           shipped kernel at block_rows around its default (the default now raises the scoped
           VMEM limit for a ~1 MiB block instead of shrinking the block to fit 12 MiB).
  wide     softmax rows of 32768-262144 columns: whole-row blocks whose body walks its columns
           in chunks (`softmax.pallas.chunk_for`; several chunk widths), the old whole-row body,
           and the column-tiled `_staged` kernel (the default before).
  buffers  scale_add with three pipeline buffers per operand (`pl.Buffered(3)`) instead of two.
  dma      scale_add with its own pipeline (`_scale_add_dma`): several DMAs per operand in flight,
           through two to four VMEM slots.
  body     scale_add's and rmsnorm's backward's bodies walking their block a group of rows (and a
           chunk of columns) at a time in a fori_loop, as softmax's wide rows do.
  partials rmsnorm's backward with dw accumulated in one VMEM-resident block per part against a
           (1, d) partial written per grid step (shipped).
  steps    rmsnorm's backward in bf16 at 64 MiB inputs: 64, 32 or 16 grid steps.
  tiles    scale_add over 2-D (rows, columns) tiles, as XLA's own fusion windows it.
  order    the same tiles walked row-major or column-major (the grid's inner axis), at tile
           shapes from 2048 x 256 to 64 x 7168, both dtypes.
  dwrow    rmsnorm's backward at its widest rows with one part changed at a time: dw as (8, d)
           partials (no reduction across sublanes), no dw, inv_rms recomputed, arbitrary grid.
  dispatch points under ~2x the ~120 us dispatch floor: each function once per call, and n calls
           inside one program (a `fori_loop`; the inputs pass an `optimization_barrier` with the
           outputs so no call is hoisted), which leaves the kernel's own time; and the
           flash-attention template's forward returning (out, lse) against out alone.
  small    the drawn float32 rmsnorm points whose single call costs ~120 us more than XLA's
           (113 and 819 rows): the shipped kernel and XLA, each with both outputs and with y
           alone, at one grid step and at 8-row blocks, and a Pallas copy of x; then each
           compiled call's host time (n calls enqueued, no wait) against its time with the wait,
           in five interleaved passes, each call's outputs held to the wait or dropped at the
           next call (as the runner's timing does), so the host's share and its spells show.

Each time: n calls, one wait, the minimum of rounds (tpu_kernels.chip.measure). Writes JSON
lines to $OUT/rows_probe.jsonl (or --out).

    python3 bench/chip_rows_probe.py [--only small,blocks,wide,buffers,dispatch,dma,body,partials,steps,tiles,order,dwrow] [--out FILE]
                                     [--quick --interpret]
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tpu_kernels.chip import grid, load, measure, probes, run  # noqa: E402
from tpu_kernels.chip.point import Point  # noqa: E402

LIMIT = 100 * 2**20


def _peaks():
    return measure.peaks(jax.devices()[0].device_kind)


def _variants(base: Point, variants: dict, floor_s: float, rounds: int, baselines: bool = True):
    """Each variant function of `base`'s inputs, on one set of inputs (so the float64 reference
    is computed once): rows of the runner's own format, with `variant` named."""
    ready = run.prepare(base, 0)
    for i, (name, fn) in enumerate(variants.items()):
        p = dataclasses.replace(base, pallas=fn, id=f"{base.id} {name}")
        row = run.run_point(p, seed=0, rounds=rounds, floor_s=floor_s, peaks=_peaks(),
                            baselines=baselines and i == 0, ready=ready)
        row["variant"] = name
        yield row


def _point(family: str, kernel: str, rows: int, d: int, dt: str) -> Point:
    (p,) = [q for q in grid.family_points(family, [(rows, d)], (dt,), {}) if q.kernel == kernel]
    return p


def _backward_rows(rows: int, d: int, dt: str, quick: bool) -> int:
    """rmsnorm's backward's default block_rows at (rows, d) in `dt` (16 at the quick shapes)."""
    if quick:
        return 16
    itemsize = 2 if dt == "bf16" else 4
    return min(rows, load.shared("_blocks").auto_rows(rows, d, itemsize, load.family("rmsnorm").pallas.BACKWARD))


def _sweep(kernel: str, cases, label: str, fn, keys: tuple[str, ...], floor_s: float, rounds: int):
    """`kernel`'s shipped default and `fn` at each config of each (rows, d, dtype, configs) case,
    named "<label> block_rows=.. key=..": a config is the values of `keys` (`br` is block_rows)."""
    for rows, d, dt, configs in cases:
        base = _point(kernel.removesuffix("_backward"), kernel, rows, d, dt)
        variants = {"default": base.pallas}
        for config in configs:
            kw = dict(zip(keys, config))
            name = " ".join(f"{'block_rows' if k == 'br' else k}={v}" for k, v in kw.items())
            variants[f"{label} {name}"] = functools.partial(fn, **kw)
        yield from _variants(base, variants, floor_s, rounds)


def blocks(quick: bool, floor_s: float, rounds: int):
    rms = load.family("rmsnorm").pallas
    sa = load.family("scale_add").pallas
    cases = (
        [("rmsnorm", "rmsnorm_backward", 64, 256, "bf16", (8, 16)), ("scale_add", "scale_add", 64, 256, "f32", (8, 16))]
        if quick
        else [
            ("rmsnorm", "rmsnorm_backward", 8192, 4096, "bf16", (64, 128, 256)),
            ("rmsnorm", "rmsnorm_backward", 8192, 8192, "bf16", (32, 64, 128)),
            ("rmsnorm", "rmsnorm_backward", 4096, 14336, "bf16", (16, 32, 64)),
            ("rmsnorm", "rmsnorm_backward", 4096, 14336, "f32", (8, 16, 32)),
            ("rmsnorm", "rmsnorm_backward", 1024, 16384, "f32", (8, 16, 32, 64)),
            ("rmsnorm", "rmsnorm_backward", 8192, 4096, "f32", (32, 64, 128)),
            ("rmsnorm", "rmsnorm", 8192, 4096, "f32", (64, 128, 256)),
            ("rmsnorm", "rmsnorm", 4096, 14336, "bf16", (16, 32, 64)),
            ("scale_add", "scale_add", 8192, 14336, "f32", (8, 16, 32, 64, 128)),
            ("scale_add", "scale_add", 8192, 14336, "bf16", (16, 32, 64, 128)),
            ("scale_add", "scale_add", 4096, 4096, "f32", (32, 64, 128, 256, 512)),
        ]
    )
    for family, kernel, rows, d, dt, brs in cases:
        fn = {"rmsnorm": rms.rmsnorm, "rmsnorm_backward": rms.rmsnorm_backward, "scale_add": None}[kernel]
        variants = {"default": _point(family, kernel, rows, d, dt).pallas}
        for br in brs:
            if kernel == "scale_add":
                variants[f"block_rows={br}"] = functools.partial(sa.scale_add, alpha=0.5, block_rows=br)
            else:
                variants[f"block_rows={br}"] = functools.partial(fn, block_rows=br)
        yield from _variants(_point(family, kernel, rows, d, dt), variants, floor_s, rounds)


def wide(quick: bool, floor_s: float, rounds: int):
    sm = load.family("softmax").pallas
    cases = (
        [("softmax", 16, 16384, "f32", (4096, 8192)), ("softmax_backward", 16, 16384, "bf16", (8192,))]
        if quick
        else [
            ("softmax", 512, 131072, "bf16", (4096, 8192, 16384)),
            ("softmax", 512, 131072, "f32", (4096, 8192, 16384)),
            ("softmax", 256, 262144, "bf16", (8192,)),
            ("softmax", 256, 262144, "f32", (8192,)),
            ("softmax_backward", 2048, 32768, "bf16", (4096, 8192, 16384)),
            ("softmax_backward", 512, 131072, "bf16", (8192,)),
            ("softmax", 2048, 32768, "bf16", (8192,)),
            ("softmax", 2048, 32768, "f32", (8192,)),
            ("softmax_backward", 2048, 32768, "f32", (8192,)),
        ]
    )
    for kernel, rows, d, dt, chunks in cases:
        backward = kernel == "softmax_backward"
        fp = sm.BACKWARD if backward else sm.FORWARD
        body = sm._bwd_kernel if backward else sm._fwd_kernel
        tile = 16 if dt == "bf16" else 8

        def rowwise(*arrays, br, chunk, backward=backward, fp=fp, body=body, kernel=kernel):
            arrays = list(arrays)
            if backward:
                arrays[1] = arrays[1].astype(arrays[0].dtype)
            return sm._rowwise(body, arrays, arrays[0].dtype, br, fp, kernel, 4, 0, chunk)

        def staged(*arrays, backward=backward):
            arrays = list(arrays)
            if backward:
                arrays[1] = arrays[1].astype(arrays[0].dtype)
            return sm._wide(arrays, arrays[0].dtype, backward=backward)

        variants = {"default": _point("softmax", kernel, rows, d, dt).pallas, "staged": staged}
        for chunk in chunks:
            for br in (tile, 2 * tile) if d <= 32768 else (tile,):
                variants[f"rows={br} chunk={chunk}"] = functools.partial(rowwise, br=br, chunk=chunk)
        if d <= 32768:
            variants[f"rows={tile} whole-row body"] = functools.partial(rowwise, br=tile, chunk=None)
        yield from _variants(_point("softmax", kernel, rows, d, dt), variants, floor_s, rounds)


def _scale_add_buffered(x, y, *, br: int, buffers: int):
    rows, cols = x.shape

    def kernel(x_ref, y_ref, o_ref):
        acc = jnp.promote_types(o_ref.dtype, jnp.float32)
        o_ref[...] = (x_ref[...].astype(acc) + 0.5 * y_ref[...].astype(acc)).astype(o_ref.dtype)

    mode = {} if buffers == 2 else {"pipeline_mode": pl.Buffered(buffers)}
    spec = pl.BlockSpec((br, cols), lambda i: (i, 0), **mode)
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(pl.cdiv(rows, br),),
        in_specs=[spec, spec],
        out_specs=spec,
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",), vmem_limit_bytes=LIMIT),
    )(x, y)


def buffers(quick: bool, floor_s: float, rounds: int):
    cases = [(64, 256, "f32", (8,))] if quick else [(8192, 14336, "f32", (16, 32)), (8192, 14336, "bf16", (32, 64)),
                                                     (4096, 4096, "f32", (64, 128))]
    for rows, d, dt, brs in cases:
        variants = {}
        for br in brs:
            for n in (2, 3):
                variants[f"block_rows={br} buffers={n}"] = functools.partial(_scale_add_buffered, br=br, buffers=n)
        yield from _variants(_point("scale_add", "scale_add", rows, d, dt), variants, floor_s, rounds)


def _scale_add_dma(x, y, *, br: int, split: int, slots: int = 2):
    """x + 0.5 y with its own pipeline: the inputs and output stay in HBM (`pl.ANY`), and each
    block of `br` rows moves as `split` row slabs per operand, all in flight at once, through
    `slots` VMEM slots: the reads of the next slots-1 blocks overlap this block's compute and the
    last blocks' writes. Asks whether XLA's 83-86% of HBM peak comes from more DMAs in flight
    than a BlockSpec pipeline's one per operand and two buffers (80-82% at any block size)."""
    rows, cols = x.shape
    n, sub = rows // br, br // split
    assert rows % br == 0 and br % split == 0 and slots >= 2, (rows, br, split, slots)

    def kernel(x_hbm, y_hbm, o_hbm, xb, yb, ob, sem_in, sem_out):
        def reads(i, slot):
            return [pltpu.make_async_copy(src.at[pl.ds(i * br + s * sub, sub)], buf.at[slot, pl.ds(s * sub, sub)],
                                          sem_in.at[slot, k, s])
                    for k, (src, buf) in enumerate(((x_hbm, xb), (y_hbm, yb))) for s in range(split)]

        def writes(i, slot):
            return [pltpu.make_async_copy(ob.at[slot, pl.ds(s * sub, sub)], o_hbm.at[pl.ds(i * br + s * sub, sub)],
                                          sem_out.at[slot, s]) for s in range(split)]

        for i in range(min(slots - 1, n)):
            for c in reads(i, i):
                c.start()

        def step(i, carry):
            slot = i % slots
            ahead = i + slots - 1  # into the slot block i-1 read from, consumed by now

            @pl.when(ahead < n)
            def _():
                for c in reads(ahead, ahead % slots):
                    c.start()

            for c in reads(i, slot):
                c.wait()

            @pl.when(i >= slots)
            def _():
                for c in writes(i - slots, slot):
                    c.wait()

            acc = jnp.promote_types(ob.dtype, jnp.float32)
            ob[slot] = (xb[slot].astype(acc) + 0.5 * yb[slot].astype(acc)).astype(ob.dtype)
            for c in writes(i, slot):
                c.start()
            return carry

        jax.lax.fori_loop(0, n, step, 0)
        for i in range(max(0, n - slots), n):
            for c in writes(i, i % slots):
                c.wait()

    anywhere = pl.BlockSpec(memory_space=pl.ANY)
    slot = pltpu.VMEM((slots, br, cols), x.dtype)
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[anywhere, anywhere],
        out_specs=anywhere,
        scratch_shapes=[slot, slot, slot, pltpu.SemaphoreType.DMA((slots, 2, split)),
                        pltpu.SemaphoreType.DMA((slots, split))],
        compiler_params=pltpu.CompilerParams(vmem_limit_bytes=LIMIT),
    )(x, y)


def dma(quick: bool, floor_s: float, rounds: int):
    # (block_rows, split, slots)
    cases = [(64, 256, "f32", [(16, 1, 2), (16, 2, 3)])] if quick else [
        (8192, 14336, "f32", [(32, 1, 2), (32, 2, 2), (32, 4, 2), (32, 8, 2), (32, 1, 3), (32, 4, 3),
                              (16, 1, 4), (64, 1, 2), (64, 4, 2)]),
        (8192, 14336, "bf16", [(64, 1, 2), (64, 4, 2), (64, 1, 3), (32, 1, 4)]),
        (4096, 4096, "f32", [(128, 1, 2), (128, 4, 2), (128, 1, 3)])]
    yield from _sweep("scale_add", cases, "dma", _scale_add_dma, ("br", "split", "slots"), floor_s, rounds)


def _groups(n: int, size: int):
    """Group g of `size` rows: an index for a block ref's first dimension."""
    return pl.ds(pl.multiple_of(n * size, size), size)


def _scale_add_grouped(x, y, *, br: int, group: int, chunk: int | None = None):
    """The shipped scale_add's BlockSpec pipeline, but the body walks its block `group` rows (and
    `chunk` columns) at a time in a fori_loop, so no full-block float32 temporary is formed."""
    rows, cols = x.shape
    chunk = chunk or cols

    def kernel(x_ref, y_ref, o_ref):
        acc = jnp.promote_types(o_ref.dtype, jnp.float32)

        def body(k, carry):
            rs, cs = _groups(k // (cols // chunk), group), _groups(k % (cols // chunk), chunk)
            o_ref[rs, cs] = (x_ref[rs, cs].astype(acc) + 0.5 * y_ref[rs, cs].astype(acc)).astype(o_ref.dtype)
            return carry

        jax.lax.fori_loop(0, (br // group) * (cols // chunk), body, 0)

    spec = pl.BlockSpec((br, cols), lambda i: (i, 0))
    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(rows // br,),
        in_specs=[spec, spec], out_specs=spec,
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",), vmem_limit_bytes=LIMIT),
    )(x, y)


def _rmsnorm_backward_grouped(x, w, r, dy, *, br: int, group: int, chunk: int | None = None):
    """The shipped rmsnorm backward's pipeline and dw partials, but the body walks its block
    `group` rows at a time (and, with `chunk`, each group's columns in two passes: sum(dy w x),
    then dx and dw), accumulating dw in a (group, d) float32 scratch reduced once per step."""
    rows, d = x.shape
    n = rows // br
    chunk = chunk or d

    def kernel(x_ref, w_ref, r_ref, dy_ref, dx_ref, dw_ref, acc_ref):
        f32 = jnp.float32
        acc_ref[...] = jnp.zeros_like(acc_ref)

        def group_body(k, carry):
            rs = _groups(k, group)
            rr = r_ref[rs, :]

            def part(c, rs=rs):
                cs = _groups(c, chunk)
                return x_ref[rs, cs].astype(f32), dy_ref[rs, cs].astype(f32), w_ref[:, cs].astype(f32), cs

            def dot(c, s):
                xc, dyc, wc, _ = part(c)
                return s + jnp.sum(dyc * wc * xc, axis=-1, keepdims=True)

            s = jax.lax.fori_loop(0, d // chunk, dot, jnp.zeros((group, 1), f32))
            m = s * rr * (1.0 / d)  # mean(g * xhat), g = dy w, xhat = x r

            def write(c, carry):
                xc, dyc, wc, cs = part(c)
                xhat = xc * rr
                dx_ref[rs, cs] = (rr * (dyc * wc - xhat * m)).astype(dx_ref.dtype)
                acc_ref[:, cs] += dyc * xhat
                return carry

            jax.lax.fori_loop(0, d // chunk, write, 0)
            return carry

        jax.lax.fori_loop(0, br // group, group_body, 0)
        dw_ref[...] = jnp.sum(acc_ref[...], axis=0, keepdims=True)

    row_spec = pl.BlockSpec((br, d), lambda i: (i, 0))
    dx, parts = pl.pallas_call(
        kernel,
        out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct((n, 1, d), jnp.float32)),
        grid=(n,),
        in_specs=[row_spec, pl.BlockSpec((1, d), lambda i: (0, 0)), pl.BlockSpec((br, 1), lambda i: (i, 0)), row_spec],
        out_specs=(row_spec, pl.BlockSpec((None, 1, d), lambda i: (i, 0, 0))),
        scratch_shapes=[pltpu.VMEM((group, d), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",), vmem_limit_bytes=LIMIT),
    )(x, w.reshape(1, d), r.reshape(-1, 1), dy.astype(x.dtype))
    return dx, parts.sum(axis=(0, 1)).astype(w.dtype)


def body(quick: bool, floor_s: float, rounds: int):
    # scale_add: (block_rows, group, chunk)
    adds = [(64, 256, "f32", [(16, 8, None), (16, 8, 128)])] if quick else [
        (8192, 14336, "f32", [(32, 8, None), (32, 32, 2048), (32, 8, 2048), (64, 8, None), (64, 16, 1792)]),
        (8192, 14336, "bf16", [(64, 16, None), (64, 16, 2048)]),
        (4096, 4096, "f32", [(128, 8, None), (128, 32, 1024)])]
    keys = ("br", "group", "chunk")
    yield from _sweep("scale_add", adds, "grouped", _scale_add_grouped, keys, floor_s, rounds)
    # rmsnorm's backward: (block_rows, group, chunk)
    norms = [(64, 256, "bf16", [(32, 16, None), (32, 16, 128)])] if quick else [
        (4096, 14336, "bf16", [(64, 16, None), (64, 16, 2048), (64, 32, 1024), (32, 16, 2048)]),
        (1024, 16384, "f32", [(16, 8, None), (16, 8, 2048), (16, 16, 1024), (8, 8, 2048)]),
        (4096, 14336, "f32", [(32, 8, 2048), (32, 16, 1024)]),
        (8192, 4096, "bf16", [(128, 16, None), (128, 16, 1024), (256, 16, 1024)]),
        (8192, 8192, "f32", [(64, 8, 2048)])]
    yield from _sweep("rmsnorm_backward", norms, "grouped", _rmsnorm_backward_grouped, keys, floor_s, rounds)


def _rmsnorm_backward_per_step(x, w, r, dy, *, br: int):
    """rmsnorm's backward as shipped: a 1-D "parallel" grid whose every step writes its own
    (1, d) float32 dw partial, added by a `sum` after."""
    return load.family("rmsnorm").pallas.rmsnorm_backward(x, w, r, dy, block_rows=br)


def _rmsnorm_backward_accumulated(x, w, r, dy, *, br: int, parts: int = 2):
    """rmsnorm's backward with dw accumulated in one VMEM-resident (1, d) block per part of a
    (parts, steps) grid ("parallel", "arbitrary"), written back once per part (shipped at 8e9da5f,
    reverted: its rows, indexed by both grid axes, are not derivably shardable)."""
    rows, d = x.shape
    steps = rows // br // parts

    def kernel(x_ref, w_ref, r_ref, dy_ref, dx_ref, dw_ref):  # 8e9da5f's body, accumulate=True
        acc = jnp.promote_types(dx_ref.dtype, jnp.float32)
        x, r = x_ref[...].astype(acc), r_ref[...].astype(acc)
        dy, w = dy_ref[...].astype(acc), w_ref[...].astype(acc)
        xhat = x * r
        g = dy * w
        dx_ref[...] = (r * (g - xhat * jnp.mean(g * xhat, axis=-1, keepdims=True))).astype(dx_ref.dtype)
        dw = jnp.sum(dy * xhat, axis=0, keepdims=True).astype(dw_ref.dtype)

        @pl.when(pl.program_id(1) == 0)
        def _():
            dw_ref[...] = jnp.zeros_like(dw_ref)

        dw_ref[...] += dw

    row_spec = pl.BlockSpec((br, d), lambda c, j: (c * steps + j, 0))
    dx, acc = pl.pallas_call(
        kernel,
        out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct((parts, 1, d), jnp.float32)),
        grid=(parts, steps),
        in_specs=[row_spec, pl.BlockSpec((1, d), lambda c, j: (0, 0)),
                  pl.BlockSpec((br, 1), lambda c, j: (c * steps + j, 0)), row_spec],
        out_specs=(row_spec, pl.BlockSpec((None, 1, d), lambda c, j: (c, 0, 0))),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary"), vmem_limit_bytes=LIMIT),
    )(x, w.reshape(1, d), r.reshape(-1, 1), dy.astype(x.dtype))
    return dx, acc.sum(axis=(0, 1)).astype(w.dtype)


def partials(quick: bool, floor_s: float, rounds: int):
    """rmsnorm's backward: dw accumulated in a VMEM-resident block per part against a partial
    row written per grid step (shipped), at the same default block. The chip record's rows were
    measured at 8e9da5f, where the shipped default was the accumulating kernel: its "default"
    rows are relabelled "accumulated per part"."""
    cases = [(64, 256, "f32")] if quick else [(4096, 14336, "bf16"), (1024, 16384, "f32"), (4096, 14336, "f32"),
                                               (8192, 4096, "bf16"), (1024, 16384, "bf16"), (8192, 8192, "f32")]
    for rows, d, dt in cases:
        base = _point("rmsnorm", "rmsnorm_backward", rows, d, dt)
        br = _backward_rows(rows, d, dt, quick)
        variants = {f"accumulated per part block_rows={br}": functools.partial(_rmsnorm_backward_accumulated, br=br),
                    f"per-step partials block_rows={br}": functools.partial(_rmsnorm_backward_per_step, br=br)}
        yield from _variants(base, variants, floor_s, rounds)


def steps(quick: bool, floor_s: float, rounds: int):
    """rmsnorm's backward in bf16 at 64 MiB inputs: the default's 64 steps of 1 MiB against 32 of
    2 MiB and 16 of 4 MiB (its bf16 body does twice the float32 work per byte of f32's)."""
    rms = load.family("rmsnorm").pallas
    cases = [(64, 256, (8, 16))] if quick else [(16384, 2048, (256, 512, 1024)), (8192, 4096, (128, 256, 512)),
                                                 (4096, 5120, (64, 128, 256))]
    for rows, d, brs in cases:
        base = _point("rmsnorm", "rmsnorm_backward", rows, d, "bf16")
        variants = {"default": base.pallas}
        variants.update({f"block_rows={br}": functools.partial(rms.rmsnorm_backward, block_rows=br) for br in brs})
        yield from _variants(base, variants, floor_s, rounds)


def _scale_add_tiles(x, y, *, br: int, bc: int, order: str = "rows"):
    """x + 0.5 y over (br, bc) tiles: a 2-D grid, as XLA's own fusion of it windows the array
    (f32 [8192, 14336]: 328 x 2048 windows, its compiled HLO's window_config). `order` "rows"
    walks a row of tiles before the next (columns inner), "cols" a column of tiles."""
    rows, cols = x.shape

    def kernel(x_ref, y_ref, o_ref):
        acc = jnp.promote_types(o_ref.dtype, jnp.float32)
        o_ref[...] = (x_ref[...].astype(acc) + 0.5 * y_ref[...].astype(acc)).astype(o_ref.dtype)

    grid = (pl.cdiv(rows, br), pl.cdiv(cols, bc))
    if order == "cols":
        grid, spec = grid[::-1], pl.BlockSpec((br, bc), lambda j, i: (i, j))
    else:
        spec = pl.BlockSpec((br, bc), lambda i, j: (i, j))
    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=grid,
        in_specs=[spec, spec], out_specs=spec,
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel"), vmem_limit_bytes=LIMIT),
    )(x, y)


def tiles(quick: bool, floor_s: float, rounds: int):
    cases = [(64, 256, "f32", [(16, 128)])] if quick else [
        (8192, 14336, "f32", [(256, 2048), (328, 2048), (512, 2048), (256, 1024), (512, 1024), (128, 2048)]),
        (8192, 14336, "bf16", [(512, 2048), (656, 2048)]),
        (4096, 4096, "f32", [(256, 2048), (512, 1024)])]
    yield from _sweep("scale_add", cases, "tiles", _scale_add_tiles, ("br", "bc"), floor_s, rounds)


def order(quick: bool, floor_s: float, rounds: int):
    cases = [(64, 256, "f32", [(16, 128, "rows"), (16, 128, "cols")])] if quick else [
        (8192, 14336, "f32", [(256, 2048, "rows"), (256, 2048, "cols"), (2048, 256, "rows"), (1024, 512, "rows"),
                              (512, 1024, "cols"), (128, 4096, "rows"), (64, 7168, "rows"), (64, 7168, "cols")]),
        (8192, 14336, "bf16", [(512, 2048, "rows"), (512, 2048, "cols"), (2048, 512, "rows"), (1024, 1024, "cols"),
                               (256, 4096, "rows"), (128, 7168, "cols")]),
        (4096, 4096, "f32", [(256, 2048, "cols"), (1024, 512, "rows"), (2048, 256, "cols")])]
    yield from _sweep("scale_add", cases, "tiles", _scale_add_tiles, ("br", "bc", "order"), floor_s, rounds)


def _rmsnorm_backward_variant(x, w, r, dy, *, br: int, dw: str = "row", inv: str = "input",
                              semantics: str = "parallel", eps: float = 1e-6):
    """rmsnorm's backward as shipped, with one part changed at a time. `dw`: "row" (shipped: a
    (1, d) float32 partial per grid step, summed over its rows in the body), "tile8" (an (8, d)
    partial per step, the block's rows added a sublane tile at a time, no reduction across
    sublanes in the body) or "none" (no dw at all: what computing it costs). `inv`: "input"
    (shipped: inv_rms read as a (block_rows, 1) column) or "recompute" (from x, in the body: what
    the column's stream costs). `semantics`: the 1-D grid's."""
    rows, d = x.shape
    n = rows // br
    parts = {"row": 1, "tile8": 8, "none": 0}[dw]

    def kernel(*refs):
        x_ref, w_ref = refs[0], refs[1]
        r_ref, dy_ref = (refs[2], refs[3]) if inv == "input" else (None, refs[2])
        outs = refs[4:] if inv == "input" else refs[3:]
        acc = jnp.promote_types(outs[0].dtype, jnp.float32)
        xv, dyv, wv = x_ref[...].astype(acc), dy_ref[...].astype(acc), w_ref[...].astype(acc)
        if r_ref is None:
            rv = jax.lax.rsqrt(jnp.mean(xv * xv, axis=-1, keepdims=True) + eps)
        else:
            rv = r_ref[...].astype(acc)
        xhat = xv * rv
        g = dyv * wv
        outs[0][...] = (rv * (g - xhat * jnp.mean(g * xhat, axis=-1, keepdims=True))).astype(outs[0].dtype)
        if parts == 1:
            outs[1][...] = jnp.sum(dyv * xhat, axis=0, keepdims=True)
        elif parts == 8:
            outs[1][...] = jnp.sum((dyv * xhat).reshape(br // 8, 8, d), axis=0)

    row_spec = pl.BlockSpec((br, d), lambda i: (i, 0))
    in_specs = [row_spec, pl.BlockSpec((1, d), lambda i: (0, 0))]
    args = [x, w.reshape(1, d)]
    if inv == "input":
        in_specs.append(pl.BlockSpec((br, 1), lambda i: (i, 0)))
        args.append(r.reshape(-1, 1))
    in_specs.append(row_spec)
    args.append(dy.astype(x.dtype))
    out_shape, out_specs = [jax.ShapeDtypeStruct(x.shape, x.dtype)], [row_spec]
    if parts:
        out_shape.append(jax.ShapeDtypeStruct((n, parts, d), jnp.float32))
        out_specs.append(pl.BlockSpec((None, parts, d), lambda i: (i, 0, 0)))
    outs = pl.pallas_call(
        kernel, out_shape=tuple(out_shape), grid=(n,), in_specs=in_specs, out_specs=tuple(out_specs),
        compiler_params=pltpu.CompilerParams(dimension_semantics=(semantics,), vmem_limit_bytes=LIMIT),
    )(*args)
    dw_out = outs[1].sum(axis=(0, 1)).astype(w.dtype) if parts else jnp.zeros(w.shape, w.dtype)
    return outs[0], dw_out


def dwrow(quick: bool, floor_s: float, rounds: int):
    """rmsnorm's backward at its widest-row misses (and one control): the shipped kernel against
    one change each (`_rmsnorm_backward_variant`), at the shipped default block. The "none" and
    "recompute" rows compute a wrong dw or skip a stream: read their time, not their error."""
    cases = [(64, 256, "f32")] if quick else [(1024, 16384, "f32"), (4096, 14336, "f32"), (4096, 14336, "bf16"),
                                               (8192, 4096, "f32")]
    changes = {"dw=tile8": {"dw": "tile8"}, "dw=none": {"dw": "none"}, "inv=recompute": {"inv": "recompute"},
               "semantics=arbitrary": {"semantics": "arbitrary"}}
    for rows, d, dt in cases:
        base = _point("rmsnorm", "rmsnorm_backward", rows, d, dt)
        br = _backward_rows(rows, d, dt, quick)
        variants = {"default": base.pallas, f"shipped body block_rows={br}": functools.partial(_rmsnorm_backward_variant, br=br)}
        variants.update({f"{k} block_rows={br}": functools.partial(_rmsnorm_backward_variant, br=br, **kw)
                         for k, kw in changes.items()})
        yield from _variants(base, variants, floor_s, rounds)


def dispatch(quick: bool, floor_s: float, rounds: int):
    n = 2 if quick else 32
    fa = load.template("flash_attention")
    attn = [(1, 2, 256, 128)] if quick else [(1, 8, 1024, 128), (1, 8, 2048, 128)]
    for b, h, s, d in attn:
        for causal in (False, True):
            (p, _) = grid.attention_points(fa, [(b, h, s, d)], ("bf16",), (causal,), {})
            fwd = functools.partial(fa.flash_attention, causal=causal)
            jf = p.xla["jax_flash"]
            variants = {
                "template (out, lse)": fwd,
                "template out only": lambda *a, fwd=fwd: fwd(*a)[0],
                "jax_flash": jf,
                f"template (out, lse) x{n} in one program": measure.in_one_program(fwd, n),
                f"template out only x{n} in one program": measure.in_one_program(lambda *a, fwd=fwd: fwd(*a)[0], n),
                f"jax_flash x{n} in one program": measure.in_one_program(jf, n),
            }
            yield from _variants(p, variants, floor_s, rounds, baselines=False)
    rows = [(16, 256)] if quick else [(16, 4096), (2048, 4096)]
    for r, d in rows:
        for kernel in ("rmsnorm", "rmsnorm_backward"):
            p = _point("rmsnorm", kernel, r, d, "bf16")
            variants = {"kernel": p.pallas, "xla": p.xla["xla"], f"kernel x{n} in one program": measure.in_one_program(p.pallas, n),
                        f"xla x{n} in one program": measure.in_one_program(p.xla["xla"], n)}
            yield from _variants(p, variants, floor_s, rounds, baselines=False)


def _copy_kernel(x):
    """x copied by a Pallas kernel in blocks of up to 128 rows: the least a Pallas program at
    x's shape can do."""
    rows = min(128, x.shape[0])

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]

    spec = pl.BlockSpec((rows, x.shape[1]), lambda i: (i, 0))
    return pl.pallas_call(kernel, grid=(pl.cdiv(x.shape[0], rows),), in_specs=[spec], out_specs=spec,
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


def _host_share(fns: dict, args: list, n: int, passes: int = 5):
    """Per compiled function, per pass: (n calls enqueued, no wait) / n and (n calls, one wait) / n,
    with each call's outputs held until the wait ("hold"), and then with each call's outputs
    dropped at the next call, as `measure.time_calls` does ("drop"). Passes interleave the
    functions (each pass runs every function once, in turn), so a slow spell of the host's lands
    on all of them."""
    compiled = {k: jax.jit(f).lower(*args).compile() for k, f in fns.items()}
    for c in compiled.values():
        jax.block_until_ready(c(*args))
    seen: dict[str, dict[str, list]] = {k: {"hold": [], "drop": []} for k in compiled}
    for _ in range(passes):
        for k, c in compiled.items():
            start = time.perf_counter()
            outs = [c(*args) for _ in range(n)]
            enqueued = time.perf_counter() - start
            jax.block_until_ready(outs)
            seen[k]["hold"].append((enqueued / n, (time.perf_counter() - start) / n))
            del outs
            start = time.perf_counter()
            for _ in range(n):
                out = c(*args)
            enqueued = time.perf_counter() - start
            jax.block_until_ready(out)
            seen[k]["drop"].append((enqueued / n, (time.perf_counter() - start) / n))
            del out
    return seen


def small(quick: bool, floor_s: float, rounds: int):
    rms = load.family("rmsnorm").pallas
    cases = [(16, 256)] if quick else [(113, 4096), (819, 3584)]
    n = 8 if quick else 200
    for r, d in cases:
        for kernel in ("rmsnorm", "rmsnorm_backward"):
            p = _point("rmsnorm", kernel, r, d, "f32")
            fn = rms.rmsnorm if kernel == "rmsnorm" else rms.rmsnorm_backward
            variants = {
                "kernel": p.pallas, "xla": p.xla["xla"],
                "kernel first output": lambda *a, f=p.pallas: (f(*a)[0],),
                "xla first output": lambda *a, f=p.xla["xla"]: (f(*a)[0],),
                "kernel block_rows=8": functools.partial(fn, block_rows=8),
                "pallas copy of x": lambda x, *rest: (_copy_kernel(x),),
            }
            if r <= 256:  # one grid step of the whole array fits the VMEM a kernel may use
                variants[f"kernel block_rows={-(-r // 8) * 8} (one step)"] = functools.partial(fn, block_rows=-(-r // 8) * 8)
            checked = {k: v for k, v in variants.items()  # the host checks every output of the backward
                       if k != "pallas copy of x" and not (kernel != "rmsnorm" and "first output" in k)}
            yield from _variants(p, checked, floor_s, rounds, baselines=False)
            ready = run.prepare(p, 0)
            args = ready[1]
            for name, modes in _host_share(variants, args, n).items():
                for mode, passes in modes.items():
                    yield {"id": f"{p.id} {name} host {mode}", "variant": name, "outputs": mode, "kernel": kernel,
                           "shape": [r, d], "dtype": "f32", "calls": n,
                           "enqueued_per_call_s": [e for e, _ in passes], "per_call_s": [t for _, t in passes]}


SECTIONS = {"small": small, "blocks": blocks, "wide": wide, "buffers": buffers, "dispatch": dispatch, "dma": dma, "body": body, "partials": partials, "steps": steps, "tiles": tiles, "order": order, "dwrow": dwrow}


def main(argv: list[str] | None = None) -> int:
    ap = probes.arguments(__doc__, "rows_probe.jsonl", SECTIONS)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--budget", type=float, default=1e9, help="seconds; no section starts after it")
    args = ap.parse_args(argv)
    if args.interpret:
        probes.use_interpreter()
    floor_s = measure.dispatch_floor()
    start = time.monotonic()
    with probes.lines(args.out, shown=400) as write:
        write({"probe": "meta", "dispatch_floor_s": floor_s, "jax": jax.__version__,
               "device_kind": jax.devices()[0].device_kind})
        for section in args.only.split(","):
            for row in SECTIONS[section](args.quick, floor_s, 1 if args.interpret else args.rounds):
                write({**row, "probe": section})
                if time.monotonic() - start > args.budget:
                    print("stopped at the budget", flush=True)
                    return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
