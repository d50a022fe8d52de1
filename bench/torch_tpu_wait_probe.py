"""How the torch layer's figures depend on how the benchmark waits and on torch_tpu's eager mode:
a probe on the TPU v5e.

The torch-on-TPU record (bench/reports/torch_tpu_v5e.json) times the decoder layer as n calls,
then one element of each result read on the host (`read_first`: a cast per tensor, a stack, a
copy to the host), then a wait, because torch_tpu's default eager mode (`DEFER_AND_FUSE`) defers
launches until a value is read. The torch layer trails the chip runner's JAX layer from the same
kernels, which JAX times with `block_until_ready` and no read. This probe separates the parts:

  layer     the layer (the flash template's attention on both sides; the JAX layer's dims),
            eager and compiled, forward and forward + backward, for each eager mode
            (`DEFER_AND_FUSE`, `DEFER_NEVER`) and each way of waiting (`read_first`, `read_once`:
            the first elements as views, one stack and one read per dtype)
  settle    each way of waiting alone, on a forward + backward's results already computed
  pieces    rmsnorm and one matmul at the layer's widths, each mode, `read_once`: the
            tpu_kernels op, a bare `jax_op` of the same kernel (rmsnorm: returning (y, inv_rms),
            and y alone), torch_tpu's own op, and the kernel under jit in JAX
  outputs   one program returning 1, 2, 4 or 8 arrays of the layer's [tokens, d], as a bare
            `jax_op`, under `torch.compile(backend="tpu")` and in eager: what an output costs
  jax_layer_now  the chip runner's JAX layer measured in this process, before the torch layer
  profile   3 forward + backward calls of the compiled torch layer and of the JAX layer under a
            jax.profiler trace: each program the chip ran, its count and device time, the
            device's busy time against the wall time

Writes the record to --out (bench/reports/torch_tpu_wait_v5e.json on the v5e; the profile alone,
`--sections profile`, to torch_tpu_layer_profile_v5e.json). Runs where the TPU suite runs
(docs/devices.md, "The TPU suite"):

    python3 bench/torch_tpu_wait_probe.py --out FILE [--sections pieces,outputs,jax_layer_now,profile,layer]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch_on_tpu as bench  # noqa: E402  (the layer and its timing, shared with the record)

SECTIONS = ("pieces", "outputs", "jax_layer_now", "profile", "layer")
"""In the order they run; the layer last (its compiles are the longest)."""

SETTLES: dict[str, Callable[[list], Any]] = {"read_first": bench.read_first, "read_once": bench.read_once}


def _modes() -> dict[str, Any]:
    mode = torch.tpu.EagerMode  # type: ignore[attr-defined]
    return {"DEFER_AND_FUSE": mode.DEFER_AND_FUSE, "DEFER_NEVER": mode.DEFER_NEVER}


def measure_layer(dims: dict[str, int], rounds: int, save: Callable[[dict], None]) -> dict[str, Any]:
    only = {"tpu_kernels_flash", "torch_tpu_flash"}
    args, g, variants, setup = bench.layer_setup(dims, only)
    compiled = {which: torch.compile(fn, backend="tpu") for which, fn in variants.items()}
    out: dict[str, Any] = {"dims": dims, **setup, "runs": {}}
    for mode_name, mode in _modes().items():
        for settle_name, settle in SETTLES.items():
            run: dict[str, Any] = {}
            out["runs"][f"{mode_name} {settle_name}"] = run
            with torch.tpu.set_eager_mode(mode):  # type: ignore[attr-defined]
                bench.time_layer(args, g, variants, compiled, run, rounds, settle,
                                 progress=lambda _: save(out))
            print(mode_name, settle_name, json.dumps(run), flush=True)
    # the settles alone, on results already computed and waited for
    results = [torch.autograd.grad(variants["tpu_kernels_flash"](*args), args, g) for _ in range(3)]
    bench.read_first(results)
    bench.sync()
    out["settle_alone_us"] = {}
    for name, settle in SETTLES.items():
        best = float("inf")
        for _ in range(rounds + 2):
            t0 = time.perf_counter()
            settle(results)
            bench.sync()
            best = min(best, time.perf_counter() - t0)
        out["settle_alone_us"][name] = round(best * 1e6, 1)
    out["settle_alone_results"] = sum(len(r) for r in results)
    save(out)
    return out


def _rmsnorm_y(x: jax.Array, w: jax.Array) -> jax.Array:
    from tpu_kernels.kernels.rmsnorm import pallas

    return pallas.rmsnorm(x, w)[0]


def _rmsnorm_both(x: jax.Array, w: jax.Array) -> tuple[jax.Array, jax.Array]:
    from tpu_kernels.kernels.rmsnorm import pallas

    return pallas.rmsnorm(x, w)


def _matmul(a: jax.Array, b: jax.Array) -> jax.Array:
    from tpu_kernels.kernels.matmul import pallas

    return pallas.matmul(a, b)


def measure_pieces(dims: dict[str, int], rounds: int, n: int = 10) -> dict[str, Any]:
    from tpu_kernels.kernels import matmul, rmsnorm

    jax_op = torch.tpu.pallas.jax_op  # type: ignore[attr-defined]
    t, d = dims["tokens"], dims["d"]
    dev, dt = torch.device("tpu"), torch.bfloat16
    x = torch.randn(t, d, device=dev).to(dt)
    w = (1 + 0.1 * torch.randn(d, device=dev)).to(dt)
    b = (torch.randn(d, d, device=dev) * d**-0.5).to(dt)
    calls: dict[str, dict[str, Callable[[], Any]]] = {
        f"rmsnorm {t}x{d}": {
            "tpu_kernels": lambda: rmsnorm(x, w),
            "jax_op (y, inv_rms)": lambda op=jax_op("wait_probe::rms_both", _rmsnorm_both): op(x, w),
            "jax_op y": lambda op=jax_op("wait_probe::rms_y", _rmsnorm_y): op(x, w),
            "torch_tpu": lambda: F.rms_norm(x, (d,), w, 1e-6),
        },
        f"matmul {t}x{d}x{d}": {
            "tpu_kernels": lambda: matmul(x, b),
            "jax_op": lambda op=jax_op("wait_probe::matmul", _matmul): op(x, b),
            "torch_tpu": lambda: x @ b,
        },
    }
    jx = jax.random.normal(jax.random.PRNGKey(0), (t, d), jnp.float32).astype(jnp.bfloat16)
    jw = jnp.ones((d,), jnp.bfloat16)
    jb = (jax.random.normal(jax.random.PRNGKey(1), (d, d), jnp.float32) * d**-0.5).astype(jnp.bfloat16)
    jax_sides = {f"rmsnorm {t}x{d}": (_rmsnorm_y, (jx, jw)), f"matmul {t}x{d}x{d}": (_matmul, (jx, jb))}
    out: dict[str, Any] = {"n": n, "settle": "read_once"}
    for piece, sides in calls.items():
        row: dict[str, Any] = {}
        for mode_name, mode in _modes().items():
            with torch.tpu.set_eager_mode(mode), torch.no_grad():  # type: ignore[attr-defined]
                for side, f in sides.items():
                    try:
                        row[f"{mode_name} {side}"] = round(
                            bench.per_call_us(f, n=n, rounds=rounds, settle=bench.read_once), 1
                        )
                    except Exception as e:  # a refusal is a finding too
                        row[f"{mode_name} {side}"] = f"{type(e).__name__}: {e}"[:300]
        fn, xs = jax_sides[piece]
        row["jax jit"] = bench.jax_us(fn, list(xs), rounds, n=n)
        out[piece] = row
        print(piece, json.dumps(row), flush=True)
    return out


OUTPUT_COUNTS = (1, 2, 4, 8)
OPS_LINE = "XLA Ops"  # a device plane's line of op events, beside bench/profile.py's MODULE_LINE


def _k_outputs(k: int) -> Callable:
    """x * 2, x * 3, ...: k arrays (one array for k = 1), annotated as `jax_op` reads them."""

    def fn(x):
        outs = tuple(x * (i + 2) for i in range(k))
        return outs if k > 1 else outs[0]

    fn.__annotations__ = {"x": jax.Array, "return": tuple[(jax.Array,) * k] if k > 1 else jax.Array}
    return fn


def measure_outputs(dims: dict[str, int], rounds: int, n: int = 10) -> dict[str, Any]:
    """One program returning k outputs of x's shape ([tokens, d] bf16: x * 2, x * 3, ...), each
    way a torch user launches one: a bare `jax_op`, `torch.compile(backend="tpu")`, and the k
    multiplies in eager; n calls and `read_once` of every output, in the default eager mode.
    What an output costs beyond a jax_op: whether a compiled program pays it too (a compiled
    forward + backward's programs return every saved activation and gradient)."""
    jax_op = torch.tpu.pallas.jax_op  # type: ignore[attr-defined]
    x = torch.randn(dims["tokens"], dims["d"], device="tpu").to(torch.bfloat16)
    out: dict[str, Any] = {"shape": [dims["tokens"], dims["d"]], "dtype": "bfloat16", "n": n, "settle": "read_once"}
    for k in OUTPUT_COUNTS:

        def eager(x: torch.Tensor, k: int = k) -> tuple[torch.Tensor, ...]:
            return tuple(x * (i + 2) for i in range(k))

        ways = {
            "jax_op": jax_op(f"wait_probe::outputs_{k}", _k_outputs(k)),
            "compiled": torch.compile(eager, backend="tpu"),
            "eager": eager,
        }
        row: dict[str, Any] = {}
        for way, f in ways.items():
            try:
                row[way] = round(bench.per_call_us(lambda f=f: f(x), n=n, rounds=rounds, settle=bench.read_once), 1)
            except Exception as e:  # a refusal is a finding too
                row[way] = f"{type(e).__name__}: {e}"[:300]
        out[str(k)] = row
        print("outputs", k, json.dumps(row), flush=True)
    return out


def device_programs(run: Callable[[], Any]) -> dict[str, Any]:
    """What the chip ran during `run()`, from a jax.profiler trace of this process (torch_tpu's
    programs run in the same libtpu): each program's name with its count and device time
    (the device planes' "XLA Modules" events), the device's busy time, the wall time, and the
    ops' time by kind (the "XLA Ops" events, their names without the trailing number:
    "fusion", "custom-call" for a Pallas kernel, "copy", ...)."""
    import time as _time

    from tpu_kernels.bench.profile import DEVICE_PLANE, MODULE_LINE, trace

    wall: list[float] = []

    def timed() -> None:
        t0 = _time.perf_counter()
        run()
        wall.append(_time.perf_counter() - t0)

    profile = trace(timed)
    programs: dict[str, dict[str, float]] = {}
    kinds: dict[str, dict[str, float]] = {}  # the ops' time by kind ("fusion", "custom-call", ...)
    for plane in profile.planes:
        if not plane.name.startswith(DEVICE_PLANE):
            continue
        for line in plane.lines:
            if line.name not in (MODULE_LINE, OPS_LINE):
                continue
            for event in line.events:
                name = event.name if line.name == MODULE_LINE else re.sub(r"[.\d]+$", "", event.name)
                row = (programs if line.name == MODULE_LINE else kinds).setdefault(name, {"count": 0, "us": 0.0})
                row["count"] += 1
                row["us"] = round(row["us"] + event.duration_ns / 1e3, 1)
    busy = round(sum(r["us"] for r in programs.values()), 1)
    top = dict(sorted(programs.items(), key=lambda kv: -kv[1]["us"])[:40])
    return {"wall_us": round(wall[0] * 1e6, 1), "device_busy_us": busy, "programs": len(programs),
            "launches": sum(int(r["count"]) for r in programs.values()), "top": top,
            "op_kinds": dict(sorted(kinds.items(), key=lambda kv: -kv[1]["us"])[:30])}


def profile_layers(dims: dict[str, int], calls: int = 3) -> dict[str, Any]:
    """`calls` forward + backward calls of the compiled torch layer (flash template attention;
    default eager mode) and of the chip runner's JAX layer under jit, each traced after a
    warm-up: where the compiled torch layer's time goes against the JAX one's, on the chip."""
    from tpu_kernels.chip import layer as jax_layer

    args, g, variants, _ = bench.layer_setup(dims, {"tpu_kernels_flash"})
    f = torch.compile(variants["tpu_kernels_flash"], backend="tpu")
    out: dict[str, Any] = {"calls": calls}

    def torch_calls() -> None:
        results = [torch.autograd.grad(f(*args), args, g) for _ in range(calls)]
        bench.read_once(results)
        bench.sync()

    try:
        torch_calls()  # compiled and warm
        out["torch_compiled"] = device_programs(torch_calls)
    except Exception as e:
        out["torch_compiled_error"] = f"{type(e).__name__}: {e}"[:1500]
    try:
        rng = np.random.default_rng(0)
        jdims = {k: v for k, v in dims.items() if k != "kv_heads"}
        host = jax_layer._inputs(jdims, rng)
        jargs = [jax.device_put(a) for a in host]
        cot = jax.device_put(rng.standard_normal(host[0].shape, dtype=np.float32).astype(jnp.bfloat16))
        layer = jax_layer._layer(*jax_layer._kernels({}), dims["heads"], dims["head_dim"])

        @jax.jit
        def grads(*a):
            return jax.vjp(layer, *a)[1](cot)

        def jax_calls() -> None:
            jax.block_until_ready([grads(*jargs) for _ in range(calls)])

        jax_calls()
        out["jax"] = device_programs(jax_calls)
    except Exception as e:
        out["jax_error"] = f"{type(e).__name__}: {e}"[:1500]
    return out


def measure_jax_layer(dims: dict[str, int], rounds: int) -> dict[str, Any]:
    """The chip runner's JAX layer (tpu_kernels/chip/layer.py) at its dims, in this process: the
    same kernels, chip and versions as the torch figures, where `jax_layer` is the committed
    record's (another run, maybe another commit)."""
    from tpu_kernels.chip import layer as jax_layer

    out: dict[str, Any] = {}
    for backward, kind in ((False, "forward"), (True, "forward_backward")):
        try:
            row = jax_layer.measure_layer(dims, backward=backward, rounds=rounds, floor_s=0.0, statics={})
            out[f"{kind}_us"] = round(row["ours_ms"] * 1e3, 1) if "ours_ms" in row else None
            out[f"{kind}_row"] = row
        except Exception as e:  # recorded: the torch figures before it stand
            out[f"{kind}_error"] = f"{type(e).__name__}: {e}"[:1500]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sections", default=",".join(SECTIONS),
                    help=f"comma-separated, of {', '.join(SECTIONS)} (default: all)")
    args = ap.parse_args(argv)
    sections = args.sections.split(",")
    if not set(sections) <= set(SECTIONS):
        ap.error(f"--sections: {sorted(set(sections) - set(SECTIONS))} not among {list(SECTIONS)}")
    import torch_tpu  # noqa: F401  (installs torch.tpu)

    from tpu_kernels.runtime.devices import tpu as tpu_device

    tpu_device.torch_tpu_pallas()
    rows = {r["backward"]: r for r in json.loads(bench.JAX_RECORD.read_text())["layer"]["rows"]}
    dims = {**rows[False]["dims"], "kv_heads": rows[False]["dims"]["heads"]}
    record: dict[str, Any] = {
        "kind": "torch_tpu_wait_probe",
        "date": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "commit": os.environ.get("TPU_KERNELS_COMMIT", ""),
        "device": torch.tpu.get_device_name(),  # type: ignore[attr-defined]
        "versions": bench._versions(),
        "jax_layer": {
            "record": "bench/reports/chip_v5e.json",
            "commit": rows[False]["commit"],
            "forward_us": rows[False]["ours_ms"] * 1e3,
            "forward_backward_us": rows[True]["ours_ms"] * 1e3,
        },
    }

    def save(part: dict[str, Any] | None = None, key: str = "layer") -> None:
        if part is not None:
            record[key] = part
        Path(args.out).write_text(json.dumps(record, indent=1) + "\n")

    record["sections"] = sections
    if "pieces" in sections:
        record["pieces"] = measure_pieces(dims, args.rounds)
        save()
    if "outputs" in sections:
        record["outputs"] = measure_outputs(dims, args.rounds)
        save()
    if "jax_layer_now" in sections:
        record["jax_layer_now"] = measure_jax_layer(rows[False]["dims"], args.rounds)
        save()
    if "profile" in sections:
        record["profile"] = profile_layers(dims)
        save()
    if "layer" in sections:
        measure_layer(dims, args.rounds, save)
        save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
