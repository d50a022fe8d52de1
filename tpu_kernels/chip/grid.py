"""The chip runner's grid: every shipped kernel family and Pallas template at model shapes.

Each family builds its own points (`kernels/<family>/chip.py`: `SECTION`, `grid()` at the
shapes its shapes.py names `CHIP`, and `points()` at any shapes), which this module collects
by section, iterating the families `load.families()` finds: adding a family adds its folder and
no line here. The Pallas templates' points live here: the flash-attention template (section
"attention", against `jax.nn.dot_product_attention` and JAX's own Pallas flash attention) and
the elementwise, row-reduction and matmul templates (section "template"). A point (`point.Point`)
is one kernel at one shape and dtype: its host inputs, the Pallas function, the same math in
XLA, a float64 host check of an output, and its flops and bytes. `quick=True` gives a few small
points of each kind (the CPU test of the runner, in interpret mode).
"""

from __future__ import annotations

import functools
from typing import Any

import jax.numpy as jnp
import numpy as np

from tpu_kernels.chip import load
from tpu_kernels.chip.point import (
    SECTIONS,
    Point,
    attention64,
    attention_bwd64,
    err,
    f64,
    grad_of,
    itemsize,
    jax_flash,
    randn,
    two,
    xla_attention,
)

ATTENTION = [(1, 8, s, 128) for s in (1024, 2048, 4096, 8192)] + [(1, 16, s, 64) for s in (2048, 8192)]
TEMPLATE_ROWS = [(8192, 4096)]
TEMPLATE_MM = [(4096, 4096, 4096)]


# ---------------------------------------------------------------- the flash-attention template
def attention_points(
    fa: Any, shapes, dtypes, causals, statics: dict, *, backward: bool = True, baselines: bool = True
) -> list[Point]:
    """The flash-attention template (module `fa`) forward, and forward + backward.

    The forward point returns the attention output alone, as JAX's flash attention does without
    residuals and as a model's forward consumes it: the template's log-sum-exp (the residual its
    backward reads) stays inside the program. Each output buffer costs a dispatch-bound call
    host time on the v5e (measure.py), so timing (out, lse) against JAX's out compared two
    outputs with one, not the kernels. The forward + backward point has each side's residuals
    inside its program."""
    points = []
    for b, hds, s, d in shapes:
        for dt in dtypes:
            for causal in causals:
                scale = 1.0 / np.sqrt(d)
                tag = f"{dt}[{b},{hds},{s},{d}]" + ("/causal" if causal else "")
                tag += "".join(f"/{k_}={v}" for k_, v in sorted(statics.items()))
                flops = 4 * b * hds * s * s * d * (0.5 if causal else 1.0)
                nbytes = 4 * b * hds * s * d * itemsize(dt)

                def fwd(q, k, v, causal=causal):
                    return fa.flash_attention(q, k, v, causal=causal, **statics)[0]

                def make(rng, b=b, hds=hds, s=s, d=d, dt=dt):
                    return tuple(randn(rng, (b, hds, s, d), dt) for _ in range(3))

                def check(inputs, out, causal=causal, scale=scale):
                    q, k, v = (a[0, 0] for a in inputs)
                    out = out[0] if isinstance(out, (tuple, list)) else out  # a probe's (out, lse) variant
                    return err(np.asarray(out)[0, 0], attention64(q, k, v, causal, scale)[0])

                xla = {}
                if baselines:
                    xla = {"jax_flash": jax_flash(causal, scale), "xla": xla_attention(causal, scale)}
                points.append(
                    Point(
                        f"flash_attention/{tag}",
                        "attention",
                        "template.flash_attention",
                        dt,
                        (b, hds, s, d),
                        make,
                        fwd,
                        xla,
                        check,
                        flops,
                        nbytes,
                        dict(statics, causal=causal),
                    )
                )
                if not backward:
                    continue

                def template_grad(q, k, v, do, causal=causal):
                    out, lse = fa.flash_attention(q, k, v, causal=causal, **statics)
                    return fa.flash_attention_backward(q, k, v, out, lse, do, causal=causal, **statics)

                def make_b(rng, b=b, hds=hds, s=s, d=d, dt=dt):
                    return tuple(randn(rng, (b, hds, s, d), dt) for _ in range(4))

                def check_b(inputs, out, causal=causal, scale=scale):
                    q, k, v, do = (a[0, 0] for a in inputs)
                    refs = attention_bwd64(q, k, v, do, causal, scale)
                    return max(err(np.asarray(o)[0, 0], r) for o, r in zip(out, refs))

                xla_b = {}
                if baselines:
                    xla_b = {
                        "jax_flash": grad_of(jax_flash(causal, scale)),
                        "xla": grad_of(xla_attention(causal, scale)),
                    }
                points.append(
                    Point(
                        f"flash_attention_fwd_bwd/{tag}",
                        "attention",
                        "template.flash_attention_fwd_bwd",
                        dt,
                        (b, hds, s, d),
                        make_b,
                        template_grad,
                        xla_b,
                        check_b,
                        3.5 * flops,
                        2 * nbytes,
                        dict(statics, causal=causal),
                        "forward + backward, each side",
                    )
                )
    return points


# ---------------------------------------------------------------- the other templates
def _template_points(shapes_rows, mm_shapes, dtypes) -> list[Point]:
    points = []
    rms = load.family("rmsnorm")
    rmsnorm64, rmsnorm_bwd64 = rms.chip.rmsnorm64, rms.chip.rmsnorm_bwd64
    ew = load.template("elementwise")
    rr = load.template("row_reduction")
    for rows, d in shapes_rows:
        for dt in dtypes:
            n, it = rows * d, itemsize(dt)

            def check_ew(inputs, out):
                x, y = map(f64, inputs)
                return err(out, 0.5 * x + y)

            def ew_xla(x, y):
                acc = jnp.promote_types(x.dtype, jnp.float32)
                return (0.5 * x.astype(acc) + y.astype(acc)).astype(x.dtype)

            points.append(
                Point(
                    f"template.elementwise/{dt}[{rows},{d}]",
                    "template",
                    "template.elementwise",
                    dt,
                    (rows, d),
                    two(rows, d, dt),
                    functools.partial(ew.elementwise, alpha=0.5),
                    {"xla": ew_xla},
                    check_ew,
                    2 * n,
                    3 * n * it,
                )
            )

            def make_rr(rng, rows=rows, d=d, dt=dt):
                return randn(rng, (rows, d), dt), randn(rng, (d,), dt)

            def check_rr(inputs, out):
                return err(out[0], rmsnorm64(*inputs)[0])

            rms_ref = rms.jax_reference
            points.append(
                Point(
                    f"template.row_reduction/{dt}[{rows},{d}]",
                    "template",
                    "template.row_reduction",
                    dt,
                    (rows, d),
                    make_rr,
                    rr.row_reduction,
                    {"xla": rms_ref.rmsnorm_jax},
                    check_rr,
                    4 * n,
                    2 * n * it,
                )
            )

            def make_rrb(rng, rows=rows, d=d, dt=dt):
                x, w = randn(rng, (rows, d), dt), randn(rng, (d,), dt)
                return x, w, rmsnorm64(x, w)[1].astype(np.float32), randn(rng, (rows, d), dt)

            def check_rrb(inputs, out):
                dx, dw = rmsnorm_bwd64(*inputs)
                return max(err(out[0], dx), err(out[1], dw))

            points.append(
                Point(
                    f"template.row_reduction_backward/{dt}[{rows},{d}]",
                    "template",
                    "template.row_reduction_backward",
                    dt,
                    (rows, d),
                    make_rrb,
                    rr.row_reduction_backward,
                    {"xla": rms_ref.rmsnorm_backward_jax},
                    check_rrb,
                    8 * n,
                    3 * n * it,
                )
            )
    mm = load.family("matmul")
    mm_ref = mm.jax_reference.matmul_jax
    template_mm = load.template("matmul")
    for m, k, n in mm_shapes:
        for dt in dtypes:
            points.append(
                mm.chip.point(
                    template_mm.matmul,
                    {"xla": mm_ref},
                    "template.matmul",
                    m,
                    k,
                    n,
                    dt,
                    {},
                    section="template",
                )
            )
    return points


def family_points(family: str, shapes, dtypes, statics: dict) -> list[Point]:
    """A family's points at the shapes given (its chip.py's `points`): what the drawn section and
    the tuning sweeps time."""
    half = load.family(family)
    return half.chip.points(half, shapes, dtypes, statics)


def points(
    *, quick: bool = False, sections: tuple[str, ...] = SECTIONS, statics: dict[str, dict] | None = None
) -> list[Point]:
    """Every point of the runner's grid (or, `quick`, a few small ones of each kind), by section
    in SECTIONS' order. `statics` overrides a kernel's defaults by family or template name (e.g.
    {"matmul": {"block_m": 256}})."""
    statics = statics or {}
    halves = [load.family(name) for name in load.families()]
    out: list[Point] = []
    for section in SECTIONS:
        if section not in sections:
            continue
        if section == "attention":  # the template first: the family's baselines are the same
            attn = [(1, 2, 256, 128)] if quick else ATTENTION
            fa, fa_statics = load.template("flash_attention"), statics.get("flash_attention", {})
            out += attention_points(fa, attn, ("bf16",), (False, True), fa_statics)
            out += attention_points(fa, attn[1:2], ("f32",), (True,), fa_statics)
        for half in halves:
            if half.chip.SECTION == section:
                out += half.chip.grid(half, quick=quick, statics=statics.get(half.name, {}))
        if section == "template":
            rows, mm = ([(16, 256)], [(128, 256, 256)]) if quick else (TEMPLATE_ROWS, TEMPLATE_MM)
            out += _template_points(rows, mm, ("bf16", "f32"))
    return out


__all__ = ["ATTENTION", "attention_points", "family_points", "points"]
