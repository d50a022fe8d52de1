"""What fusing a SwiGLU MLP's gate into its down projection costs and saves: a probe, JAX alone.

matmul's gated kernels (tpu_kernels/kernels/matmul/gated.py) compute (silu(g) * u) @ w with the
gate made in VMEM on each a tile, and its gradients with the gate's in the dh product's last
step. This times, at one FFN's down projection [T, ffn] x [ffn, d], bf16:

  forward        XLA: jnp.dot(silu(g) * u, w); unfused: silu(g) * u in JAX, then matmul's kernel;
                 matmul's kernel on h alone (no gate: the floor); and the gated kernel, at its
                 default blocks and at the blocks that make the gate once per element (block_n
                 the whole d), for each way of writing the gate (`GATES`).
  fwd_bwd        the same sides' forward + backward (XLA's by autodiff; the unfused one's
                 backward matmul's kernels after JAX's gate; the gated one's its own kernels).

Each side's rounds interleaved (measure.time_interleaved), n calls then one wait, min of
`--rounds`. The gated sides' outputs are checked against XLA's (normwise). JSON lines to
$OUT/gated_probe.jsonl (or --out).

    python3 bench/chip_gated_probe.py [--dims T,ffn,d;...] [--out FILE] [--quick --interpret]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tpu_kernels.chip import load, measure  # noqa: E402


def _exp_div(g, u):
    g32 = g.astype(jnp.float32)
    return (g32 / (1.0 + jnp.exp(-g32)) * u.astype(jnp.float32)).astype(g.dtype)


def _tanh(g, u):
    x = 0.5 * g.astype(jnp.float32)
    return (x * (1.0 + jnp.tanh(x)) * u.astype(jnp.float32)).astype(g.dtype)


GATES = {"exp_div": _exp_div, "tanh": _tanh}
"""Ways to write silu(g) * u in the kernel: sigmoid as 1 / (1 + exp(-g)), or as (1 + tanh(g / 2)) / 2."""


def _gradients(f, dout):
    """g, u, w -> f's gradients for the cotangent `dout`."""
    return lambda g, u, w: jax.vjp(f, g, u, w)[1](dout)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dims", default="2560,8960,1536;1536,28672,8192")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--interpret", action="store_true")
    args = ap.parse_args(argv)
    out_path = Path(args.out or Path(os.environ.get("OUT", ".")) / "gated_probe.jsonl")
    dims = [(256, 512, 256)] if args.quick else [tuple(int(v) for v in p.split(",")) for p in args.dims.split(";")]
    ctx = contextlib.nullcontext()
    if args.interpret:
        from jax.experimental.pallas import tpu as pltpu

        ctx = pltpu.force_tpu_interpret_mode()
    with ctx, out_path.open("w") as f:
        for t, ffn, d in dims:
            for row in probe(t, ffn, d, args.rounds):
                print(json.dumps(row), flush=True)
                f.write(json.dumps(row) + "\n")
    return 0


def probe(t: int, ffn: int, d: int, rounds: int):
    mm = load.family("matmul")
    from tpu_kernels import wiring

    gated = wiring.registered("tpu_kernels.kernels.matmul.gated")
    rng = np.random.default_rng(0)

    def bf(shape, scale=1.0):
        return jax.device_put((rng.standard_normal(shape, dtype=np.float32) * scale).astype(jnp.bfloat16))

    g, u, w, dout = bf((t, ffn)), bf((t, ffn)), bf((ffn, d), ffn**-0.5), bf((t, d))
    whole_n = dict(block_m=min(t, 1024), block_n=d, block_k=min(ffn, 512))

    def xla(g, u, w):
        return jnp.dot(jax.nn.silu(g) * u, w, preferred_element_type=jnp.float32).astype(g.dtype)

    def unfused(g, u, w):
        return mm.pallas.matmul(jax.nn.silu(g) * u, w)

    def floor(g, u, w):  # matmul's kernel on one of the operands: the product without any gate
        return mm.pallas.matmul(g, w)

    def fused(gate_fn, **blocks):
        def run(g, u, w):
            gated._gate = gate_fn  # traced now: the kernel body reads the module's _gate
            return gated.swiglu_matmul(g, u, w, **blocks)

        return run

    def with_vjp(fwd, bwd):
        @jax.custom_vjp
        def f(g, u, w):
            return fwd(g, u, w)

        f.defvjp(lambda g, u, w: (fwd(g, u, w), (g, u, w)), lambda res, dd: bwd(*res, dd))
        return f

    def unfused_bwd(g, u, w, dd):
        h, vjp = jax.vjp(lambda g, u: jax.nn.silu(g) * u, g, u)
        dh, dw = mm.pallas.matmul_backward(h, w, dd)
        return (*vjp(dh), dw)

    def gated_bwd(gate_fn, **blocks):
        def run(g, u, w, dd):
            gated._gate = gate_fn
            return gated.swiglu_matmul_backward(g, u, w, dd, **blocks)

        return run

    original = gated._gate
    sides = {"xla": xla, "unfused": unfused, "floor": floor}
    for name, fn in GATES.items():
        sides[f"gated_{name}_default"] = fused(fn)
        sides[f"gated_{name}_whole_n"] = fused(fn, **whole_n)
    ref = None
    for mode in ("fwd", "fwd_bwd"):
        compiled, errors = {}, {}
        for name, fn in sides.items():
            if mode == "fwd_bwd":
                if name == "floor":
                    continue
                if name == "xla":
                    f = fn
                elif name == "unfused":
                    f = with_vjp(unfused, unfused_bwd)
                else:
                    gate_name = name.removeprefix("gated_").removesuffix("_default").removesuffix("_whole_n")
                    blocks = whole_n if name.endswith("whole_n") else {}
                    f = with_vjp(fn, gated_bwd(GATES[gate_name], **blocks))
                target = _gradients(f, dout)
            else:
                target = fn
            c, _, error = measure.compile_fn(target, (g, u, w))
            gated._gate = original
            if error is not None:
                errors[name] = error
            else:
                compiled[name] = c
        times = measure.time_interleaved(compiled, (g, u, w), rounds=rounds)
        outs = {name: jax.device_get(c(g, u, w)) for name, c in compiled.items()}
        ref = outs.get("xla")
        for name in sides:
            if mode == "fwd_bwd" and name == "floor":
                continue
            row = {"dims": [t, ffn, d], "mode": mode, "side": name}
            if name in errors:
                row["error"] = errors[name][:500]
            else:
                s = times[name]
                if isinstance(s, Exception):
                    row["run_error"] = measure.error_text(s)[:500]
                else:
                    row["us"] = round(float(s) * 1e6, 1)
                    row["spread"] = None if s.spread is None else round(s.spread, 3)
                if ref is not None and name not in ("xla", "floor"):
                    row["err_vs_xla"] = max(measure.normwise(a, b) for a, b in
                                            zip(jax.tree.leaves(outs[name]), jax.tree.leaves(ref), strict=True))
            yield row


if __name__ == "__main__":
    sys.exit(main())
