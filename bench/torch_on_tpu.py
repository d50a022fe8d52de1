"""tpu_kernels through torch on a TPU: what a call costs and how fast a decoder layer runs.

    python bench/torch_on_tpu.py --out bench/reports/torch_tpu_v5e.json [--quick]

Run on a TPU machine with torch_tpu (docs/devices.md, "The TPU suite"). Measures, on TPU tensors:

- per call, on tiny tensors (dispatch-bound: what the call path costs, not the kernel): each
  shipped op against a bare `torch.tpu.pallas.jax_op` of the same JAX function (the floor
  tpu_kernels builds on), a bare `jax_op` of the plain-jnp reference, and torch_tpu's own op of
  the same math; also with an input that requires grad;
- a Llama-style decoder layer in torch (bf16, model widths), forward and forward + backward,
  eager and under `torch.compile(backend="tpu")`: rmsnorm and the seven matmuls as tpu_kernels
  ops, against the same layer from torch_tpu's own ops (`F.rms_norm`, `@`), with the same
  attention on both sides, measured two ways: torch_tpu's `F.scaled_dot_product_attention`, and
  the flash template's op (`tpu-kernels new`; k and v repeated to q's heads);
- the same layer from the kernels of the chip runner's JAX layer (flash template attention), at
  that layer's dims, against its committed JAX times;
- a cProfile of the per-call path (the top functions by own time), to see where a call goes.

Times: n calls, then one `torch.accelerator.synchronize()`, the minimum over rounds; one
element of each of the layer's results (its output, or every gradient from
`torch.autograd.grad`) is read on the host before the wait (torch_tpu defers launches until a
value is read: `per_call_us`), which costs a few tiny ops, not a pass over the results. No
assertion reads a time; the record is what tests/test_tpu_record.py checks for consistency.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import json
import pstats
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax  # jax_op reads the bare functions' annotations (jax.Array) from this module's globals
import torch
import torch.nn.functional as F


def sync() -> None:
    torch.accelerator.synchronize()


def per_call_us(
    fn: Callable[[], Any], *, n: int, rounds: int, settle: Callable[[list], Any] | None = None
) -> float:
    """Microseconds per call: n calls then one wait, the best of `rounds` (after a warm-up).

    `settle(results)`: reads, on the host, a value that depends on every call's result. torch_tpu
    defers eager launches (`torch.tpu.EagerMode.DEFER_AND_FUSE`) until a value is read, so a
    result nobody reads need not run by the time the device is synchronized: the chip's first
    layer record had forward + backward faster than forward alone. The tiny per-call ops need
    none: what they time is the call's host path."""
    for _ in range(3):
        r = fn()
        if settle is not None:
            settle([r])
    sync()
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        results = [fn() for _ in range(n)]
        if settle is not None:
            settle(results)
        sync()
        best = min(best, (time.perf_counter() - t0) / n)
    return best * 1e6


def read_first(results: list) -> None:
    """`settle` for calls that each return a tensor or a tuple of them: the first element of
    every tensor, read on the host (each depends on the whole program that made it)."""
    flat = [t for r in results for t in (r if isinstance(r, (tuple, list)) else (r,))]
    torch.stack([t.reshape(-1)[0].float() for t in flat]).cpu()


def read_once(results: list) -> None:
    """`settle` in as few ops as it can: the first element of every tensor taken as a view (no
    op each), stacked and read, one read per dtype, where read_first casts each element first
    (a tiny op per tensor). bench/torch_tpu_wait_probe.py times the layer with both: the host's
    reads overlap the chip's work, and the figures agree (docs/devices.md)."""
    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    for r in results:
        for t in r if isinstance(r, (tuple, list)) else (r,):
            by_dtype.setdefault(t.dtype, []).append(t.reshape(-1)[0])
    for firsts in by_dtype.values():
        torch.stack(firsts).cpu()


def _bare_ops() -> dict[str, Any]:
    """Bare jax_ops of the shipped kernels' JAX halves and of plain jnp, as a torch_tpu user
    would write them."""
    import jax.numpy as jnp

    from tpu_kernels.kernels import rmsnorm, scale_add, softmax

    jax_op = torch.tpu.pallas.jax_op  # type: ignore[attr-defined]

    def bare_scale_add(x: jax.Array, y: jax.Array) -> jax.Array:
        return scale_add.fn(x=x, y=y, alpha=0.5)

    def jnp_scale_add(x: jax.Array, y: jax.Array) -> jax.Array:
        return x + 0.5 * y

    def bare_softmax(x: jax.Array) -> jax.Array:
        return softmax.fn(x=x)

    def jnp_softmax(x: jax.Array) -> jax.Array:
        return jax.nn.softmax(x, axis=-1)

    def bare_rmsnorm(x: jax.Array, w: jax.Array) -> tuple[jax.Array, jax.Array]:
        return rmsnorm.fn(x=x, weight=w)

    def jnp_rmsnorm(x: jax.Array, w: jax.Array) -> jax.Array:
        xf = x.astype(jnp.float32)
        return (xf * jax.lax.rsqrt(jnp.mean(xf * xf, -1, keepdims=True) + 1e-6) * w).astype(x.dtype)

    fns = dict(
        bare_scale_add=bare_scale_add,
        jnp_scale_add=jnp_scale_add,
        bare_softmax=bare_softmax,
        jnp_softmax=jnp_softmax,
        bare_rmsnorm=bare_rmsnorm,
        jnp_rmsnorm=jnp_rmsnorm,
    )
    return {k: jax_op(f"tpu_kernels_bench::{k}", f) for k, f in fns.items()}


def measure_per_call(n: int, rounds: int) -> dict[str, Any]:
    from tpu_kernels.kernels import rmsnorm, scale_add, softmax

    dev = torch.device("tpu")
    x, y = torch.randn(8, 128, device=dev), torch.randn(8, 128, device=dev)
    w = torch.randn(128, device=dev)
    xg = x.clone().requires_grad_(True)
    bare = _bare_ops()
    rows = {
        "scale_add": {
            "torch_tpu": lambda: torch.add(x, y, alpha=0.5),
            "jax_op_pallas": lambda: bare["bare_scale_add"](x, y),
            "jax_op_jnp": lambda: bare["jnp_scale_add"](x, y),
            "tpu_kernels": lambda: scale_add(x, y, alpha=0.5),
            "tpu_kernels_requires_grad": lambda: scale_add(xg, y, alpha=0.5),
        },
        "softmax": {
            "torch_tpu": lambda: torch.softmax(x, -1),
            "jax_op_pallas": lambda: bare["bare_softmax"](x),
            "jax_op_jnp": lambda: bare["jnp_softmax"](x),
            "tpu_kernels": lambda: softmax(x),
            "tpu_kernels_requires_grad": lambda: softmax(xg),
        },
        "rmsnorm": {
            "torch_tpu": lambda: F.rms_norm(x, (128,), w, 1e-6),
            "jax_op_pallas": lambda: bare["bare_rmsnorm"](x, w),
            "jax_op_jnp": lambda: bare["jnp_rmsnorm"](x, w),
            "tpu_kernels": lambda: rmsnorm(x, w),
            "tpu_kernels_requires_grad": lambda: rmsnorm(xg, w),
        },
    }
    out: dict[str, Any] = {"shape": [8, 128], "dtype": "float32", "n": n, "rounds": rounds, "ops": {}}
    for op, calls in rows.items():
        times = {k: round(per_call_us(f, n=n, rounds=rounds), 1) for k, f in calls.items()}
        floor = times["jax_op_pallas"]
        times["bound_us"] = round(1.1 * floor + 10, 1)  # issue 57's target: 1.1x the floor + 10 us
        out["ops"][op] = times
    return out


def profile_call(n: int) -> str:
    from tpu_kernels.kernels import scale_add

    dev = torch.device("tpu")
    x, y = torch.randn(8, 128, device=dev), torch.randn(8, 128, device=dev)
    for _ in range(10):
        scale_add(x, y, alpha=0.5)
    sync()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n):
        scale_add(x, y, alpha=0.5)
    sync()
    prof.disable()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(45)
    return s.getvalue()


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """torch_tpu's causal attention, k and v with fewer heads than q (GQA)."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=k.shape[1] != q.shape[1])


@functools.cache
def flash_template_attention() -> Callable:
    """The flash-attention template rendered with `tpu-kernels new` (as a user would), as the
    layer's attention: causal, k and v repeated to q's heads (the template has no GQA). Rendered
    once per process (a second rendering of the same name is refused)."""
    import importlib
    import sys
    import tempfile

    from tpu_kernels import scaffold

    root = tempfile.mkdtemp(prefix="bench_flash_")
    scaffold.new("bench_flash", "flash_attention", backend="pallas", dest=root, namespace="bench_tpu")
    sys.path.insert(0, root)
    op = importlib.import_module("bench_flash").bench_flash

    def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        group = q.shape[1] // k.shape[1]
        if group > 1:
            k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        return op(q, k, v, causal=True)

    return attention


def _layer(rms: Callable, mm: Callable, dims: dict[str, int], attention: Callable = sdpa) -> Callable:
    heads, kv, hd = dims["heads"], dims["kv_heads"], dims["head_dim"]

    def run(x, w1, w2, wq, wk, wv, wo, wg, wu, wd):
        t = x.shape[0]
        h = rms(x, w1)
        q = mm(h, wq).view(t, heads, hd).transpose(0, 1)[None]
        k = mm(h, wk).view(t, kv, hd).transpose(0, 1)[None]
        v = mm(h, wv).view(t, kv, hd).transpose(0, 1)[None]
        o = attention(q, k, v)
        x = x + mm(o[0].transpose(0, 1).reshape(t, heads * hd), wo)
        h = rms(x, w2)
        return x + mm(F.silu(mm(h, wg)) * mm(h, wu), wd)

    return run


def layer_setup(
    dims: dict[str, int], only: set[str] | None = None
) -> tuple[list[torch.Tensor], torch.Tensor, dict[str, Callable], dict[str, Any]]:
    """The layer's inputs, its output cotangent, its variants (`only`: those named) and a record
    holding each variant's forward difference from torch_tpu's own layer."""
    from tpu_kernels.kernels import matmul, rmsnorm

    dev, dt = torch.device("tpu"), torch.bfloat16
    d, hd, heads, kv, ffn, t = (
        dims["d"],
        dims["head_dim"],
        dims["heads"],
        dims["kv_heads"],
        dims["ffn"],
        dims["tokens"],
    )

    def p(*shape, scale=1.0):
        return (torch.randn(*shape, device=dev, dtype=torch.float32) * scale).to(dt).requires_grad_(True)

    def norm_weight():
        return (1 + 0.1 * torch.randn(d, device=dev, dtype=torch.float32)).to(dt).requires_grad_(True)

    args = [
        p(t, d),
        norm_weight(),
        norm_weight(),
        p(d, heads * hd, scale=d**-0.5),
        p(d, kv * hd, scale=d**-0.5),
        p(d, kv * hd, scale=d**-0.5),
        p(heads * hd, d, scale=(heads * hd) ** -0.5),
        p(d, ffn, scale=d**-0.5),
        p(d, ffn, scale=d**-0.5),
        p(ffn, d, scale=ffn**-0.5),
    ]
    ours = _layer(lambda x, w: rmsnorm(x, w), lambda a, b: matmul(a, b), dims)
    native = _layer(lambda x, w: F.rms_norm(x, (x.shape[-1],), w, 1e-6), lambda a, b: a @ b, dims)
    variants = {"tpu_kernels": ours, "torch_tpu": native}
    g = torch.randn(t, d, device=dev, dtype=dt)
    out: dict[str, Any] = {"dims": dims, "dtype": "bfloat16"}
    try:  # attention the other way, the flash template's op, on both sides
        flash = flash_template_attention()
        variants["tpu_kernels_flash"] = _layer(
            lambda x, w: rmsnorm(x, w), lambda a, b: matmul(a, b), dims, flash
        )
        variants["torch_tpu_flash"] = _layer(
            lambda x, w: F.rms_norm(x, (x.shape[-1],), w, 1e-6), lambda a, b: a @ b, dims, flash
        )
    except Exception as e:
        out["flash_error"] = f"{type(e).__name__}: {e}"[:1500]
    if only is not None:
        variants = {k: v for k, v in variants.items() if k in only}
    with torch.no_grad():
        ref = native(*args).float()
        for which, fn in variants.items():
            if which != "torch_tpu":
                diff = ((fn(*args).float() - ref).norm() / ref.norm()).item()
                out[f"forward_difference_{which}_vs_torch_tpu"] = diff
    return args, g, variants, out


def time_layer(
    args: list[torch.Tensor],
    g: torch.Tensor,
    variants: dict[str, Callable],
    compiled: dict[str, Callable],
    out: dict[str, Any],
    rounds: int,
    settle: Callable[[list], Any],
    progress: Callable[[dict], None] | None = None,
) -> dict[str, Any]:
    """Each variant in eager and compiled, forward and forward + backward, into `out`, with each
    tpu_kernels variant's speed over torch_tpu's with the same attention."""
    out["rounds"] = rounds
    # the output (forward) or every gradient (forward + backward, from torch.autograd.grad: no
    # accumulation into .grad), read by `settle`: the same on both sides
    tasks = [
        (m, w, k) for k in ("forward", "forward_backward") for m in ("eager", "compiled") for w in variants
    ]
    # torch_tpu's SDPA backward has failed to compile on the chip (Mosaic cannot legalize
    # math.log2), and a failed deferred program once took the process down: those go last
    tasks.sort(key=lambda t: t[2] == "forward_backward" and "flash" not in t[1])
    for mode, which, kind in tasks:
        f = compiled[which] if mode == "compiled" else variants[which]

        def fwd(f=f):
            with torch.no_grad():
                return f(*args)

        def fwd_bwd(f=f):
            return torch.autograd.grad(f(*args), args, g)

        if f"{mode}_{which}_error" in out:
            continue  # its forward failed to compile
        try:
            if kind == "forward":
                us = per_call_us(fwd, n=5, rounds=rounds, settle=settle)
            else:
                us = per_call_us(fwd_bwd, n=3, rounds=rounds, settle=settle)
            out[f"{mode}_{which}_{kind}_us"] = round(us, 1)
        except Exception as e:  # a compile failure is a finding: recorded, the other figures kept
            error_key = f"{mode}_{which}_error" if kind == "forward" else f"{mode}_{which}_{kind}_error"
            out[error_key] = f"{type(e).__name__}: {e}"[:1500]
        for suffix in ("", "_flash"):  # the same attention on both sides
            ours_key = f"{mode}_tpu_kernels{suffix}_{kind}_us"
            native_key = f"{mode}_torch_tpu{suffix}_{kind}_us"
            if ours_key in out and native_key in out:
                out[f"{mode}_{kind}_speedup{suffix}"] = round(out[native_key] / out[ours_key], 3)
        if progress is not None:
            progress(out)
    return out


def measure_layer(
    dims: dict[str, int],
    rounds: int,
    only: set[str] | None = None,
    progress: Callable[[dict], None] | None = None,
    settle: Callable[[list], Any] = read_first,
) -> dict[str, Any]:
    """The layer's variants (`only`: those named) in eager and compiled, forward and forward +
    backward, and each tpu_kernels variant's speed over torch_tpu's with the same attention.
    `progress(figures so far)` after each measurement: the caller saves them."""
    args, g, variants, out = layer_setup(dims, only)
    compiled = {which: torch.compile(fn, backend="tpu") for which, fn in variants.items()}
    return time_layer(args, g, variants, compiled, out, rounds, settle, progress)


def _ratio(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}x"


def headline(record: dict[str, Any], suite: dict[str, Any]) -> str:
    """README's table of torch-on-TPU figures: the TPU suite's outcome (`suite`: its record,
    bench/reports/tpu_suite_v5e.json), one call's cost against a bare jax_op, and the decoder
    layer against torch_tpu's own ops and the chip runner's JAX layer (`record`: this script's)."""
    c = suite["counts"]
    ops = record["per_call"]["ops"]
    shape = "x".join(map(str, record["per_call"]["shape"]))
    met = [name for name, o in ops.items() if o["tpu_kernels"] <= o["bound_us"]]
    calls = ", ".join(
        f"{name} {o['tpu_kernels']:.0f} ({o['jax_op_pallas']:.0f}, {o['torch_tpu']:.0f})"
        for name, o in ops.items()
    )
    layer, vs_jax = record.get("layer", {}), record.get("layer_vs_jax", {})
    d = layer.get("dims", {})

    def pair(suffix: str = "") -> str:
        text = ", ".join(
            f"{m} {_ratio(layer.get(f'{m}_forward_speedup{suffix}'))}" for m in ("eager", "compiled")
        )
        both = [layer.get(f"{m}_forward_backward_speedup{suffix}") for m in ("eager", "compiled")]
        if any(v is not None for v in both):
            text += f"; forward + backward eager {_ratio(both[0])}, compiled {_ratio(both[1])}"
        elif any(f"{m}_torch_tpu_forward_backward_error" in layer for m in ("eager", "compiled")):
            text += "; forward + backward: torch_tpu's SDPA backward fails to compile"
        return text

    def vs(kind: str) -> str:
        return ", ".join(
            f"{m} {_ratio(vs_jax.get(f'{m}_{kind}_speed_vs_jax'))}" for m in ("eager", "compiled")
        )

    lost = ""
    if suite.get("lost"):  # scripts/tpu_suite_lost.py: a process's record rebuilt from its log
        lost = f"; {suite['lost']['tests']} from the run's log, figures lost"
    # tests run again at a later commit (tests/test_tpu_record.py checks the record's reruns)
    reruns = "".join(f", {r['tests']} rerun at {r['commit'][:10]}" for r in suite.get("reruns", []))
    total = c["passed"] + c["failed"] + c["skipped"]
    # a failure is said with its test file, not folded into the count
    files = sorted({k.split("::")[0].rsplit("/", 1)[-1] for k, v in suite.get("tests", {}).items()
                    if v.get("outcome") == "failed"})
    failed = f"{c['failed']} failed, in {', '.join(files)}; " if c["failed"] else ""
    lines = [
        "| through torch on a TPU v5e (torch_tpu) | figure |",
        "|---|---|",
        f"| TPU suite: tests passing | {c['passed']} of {total} ({failed}{c['skipped']} skipped{lost}) |",
        f"| one {shape} float32 call within 1.1x a bare `jax_op` + 10 us: us (jax_op, torch_tpu) | "
        f"{len(met)} of {len(ops)}: {calls} |",
        f"| decoder layer (bf16, {d.get('tokens')} tokens, {d.get('d')} -> {d.get('ffn')}, GQA "
        f"{d.get('heads')}:{d.get('kv_heads')}) over torch_tpu's ops, SDPA | forward {pair()} |",
        f"| the same, the flash template's attention on both | forward {pair('_flash')} |",
        f"| that layer over the chip runner's JAX one ({vs_jax.get('dims', {}).get('tokens')} tokens, MHA) | "
        f"forward {vs('forward')}; forward + backward {vs('forward_backward')} |",
    ]
    v = suite["versions"]
    lines += [
        "",
        f"_By `scripts/tpu-suite` on a {suite['device']} (torch {v.get('torch')}, torch_tpu "
        f"{v.get('torch_tpu')}, JAX {v.get('jax')}), tests at {suite['commit'][:10]}{reruns}; "
        "[devices](docs/devices.md#tpu-the-tpu-suite-through-torch-on-a-chip-scriptstpu-suite)._",
    ]
    return "\n".join(lines) + "\n"


def _versions() -> dict[str, str]:
    import importlib.metadata as md
    import platform

    out = {"python": platform.python_version()}
    for name in ("torch", "torch-tpu", "jax", "libtpu"):
        try:
            out[name.replace("-", "_")] = md.version(name)
        except md.PackageNotFoundError:
            continue
    return out


def _commit() -> str:
    """The checkout's commit: TPU_KERNELS_COMMIT on a device machine, whose copy of the tree
    has no history of its own (scripts/tpu-suite's caller sets it), else git's."""
    import os
    import subprocess

    if os.environ.get("TPU_KERNELS_COMMIT"):
        return os.environ["TPU_KERNELS_COMMIT"]
    root = Path(__file__).resolve().parents[1]
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True
    ).stdout.strip()


JAX_RECORD = Path(__file__).resolve().parent / "reports" / "chip_v5e.json"


def jax_us(f: Callable, xs: list, rounds: int, n: int = 5) -> float:
    """Microseconds per call of `f` under jit: n calls then one wait, the best of `rounds`."""
    c = jax.jit(f)
    jax.block_until_ready(c(*xs))
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        jax.block_until_ready([c(*xs) for _ in range(n)])
        best = min(best, (time.perf_counter() - t0) / n)
    return round(best * 1e6, 1)


def measure_pieces(dims: dict[str, int], rounds: int) -> dict[str, Any]:
    """The layer's kernels one at a time, at the layer's dims (bf16): each tpu_kernels op on TPU
    tensors, forward and forward + backward (`torch.autograd.grad`), against the same kernels
    composed in JAX under jit as the chip runner's layer composes them (chip/layer.py), and the
    host's share of each torch call (the time to issue the n calls). Where the torch layer's
    time goes beyond the JAX layer's: a piece slower than its JAX twin, or the glue between."""
    import jax.numpy as jnp

    from tpu_kernels.chip import layer as jax_layer
    from tpu_kernels.kernels import matmul, rmsnorm

    dev, dt = torch.device("tpu"), torch.bfloat16
    t, d, ffn, heads, hd = dims["tokens"], dims["d"], dims["ffn"], dims["heads"], dims["head_dim"]
    jmm, jrms, jatt = jax_layer._kernels({})
    flash = flash_template_attention()
    pieces = {  # name: (torch op, JAX twin, input shapes, output shape)
        f"matmul {t}x{d}x{d}": (matmul, jmm, [(t, d), (d, d)], (t, d)),
        f"matmul {t}x{d}x{ffn}": (matmul, jmm, [(t, d), (d, ffn)], (t, ffn)),
        f"matmul {t}x{ffn}x{d}": (matmul, jmm, [(t, ffn), (ffn, d)], (t, d)),
        f"rmsnorm {t}x{d}": (rmsnorm, jrms, [(t, d), (d,)], (t, d)),
        f"flash 1x{heads}x{t}x{hd}": (flash, jatt, [(1, heads, t, hd)] * 3, (1, heads, t, hd)),
    }

    def host_us(f: Callable, n: int = 5) -> float:
        t0 = time.perf_counter()
        results = [f() for _ in range(n)]
        host = (time.perf_counter() - t0) / n
        read_first(results)
        sync()
        return round(host * 1e6, 1)

    out: dict[str, Any] = {"dims": dims, "dtype": "bfloat16", "rounds": rounds, "pieces": {}}
    key = jax.random.PRNGKey(0)
    for name, (op, twin, shapes, out_shape) in pieces.items():
        xs = [(torch.randn(*s, device=dev) * s[-1] ** -0.5).to(dt).requires_grad_(True) for s in shapes]
        g = torch.randn(*out_shape, device=dev, dtype=dt)
        jx = [jax.random.normal(key, s, jnp.float32).astype(jnp.bfloat16) * s[-1] ** -0.5 for s in shapes]
        jg = jax.random.normal(key, out_shape, jnp.float32).astype(jnp.bfloat16)

        def vjp(*a, twin=twin):  # the output too: else a forward whose residuals are its
            # inputs (matmul's) is dead code under jit, and the figure the backward alone
            y, pullback = jax.vjp(twin, *a[:-1])
            return y, pullback(a[-1])

        def fwd(op=op, xs=xs):
            with torch.no_grad():
                return op(*xs)

        def fwd_bwd(op=op, xs=xs, g=g):
            return torch.autograd.grad(op(*xs), xs, g)

        row = {
            "torch_forward_us": round(per_call_us(fwd, n=5, rounds=rounds, settle=read_first), 1),
            "torch_forward_backward_us": round(per_call_us(fwd_bwd, n=5, rounds=rounds, settle=read_first), 1),
            "torch_forward_host_us": host_us(fwd),
            "torch_forward_backward_host_us": host_us(fwd_bwd),
            "jax_forward_us": jax_us(twin, jx, rounds),
            "jax_forward_backward_us": jax_us(vjp, jx + [jg], rounds),
        }
        out["pieces"][name] = row
        print(f"  {name}: " + " ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    return out


def measure_vs_jax(rounds: int, progress: Callable[[dict], None] | None = None) -> dict[str, Any]:
    """The torch layer from the same kernels as the chip runner's JAX layer (matmul, rmsnorm and
    the flash template; tpu_kernels/chip/layer.py), at its dims, against that layer's committed
    times (bench/reports/chip_v5e.json, "layer"): what going through torch costs a model."""
    rows = {r["backward"]: r for r in json.loads(JAX_RECORD.read_text())["layer"]["rows"]}
    dims = {**rows[False]["dims"], "kv_heads": rows[False]["dims"]["heads"]}  # its attention is MHA
    out = measure_layer(dims, rounds, only={"tpu_kernels_flash"}, progress=progress)
    out["jax_layer"] = {
        "record": "bench/reports/chip_v5e.json",
        "commit": rows[False]["commit"],
        "forward_us": rows[False]["ours_ms"] * 1e3,
        "forward_backward_us": rows[True]["ours_ms"] * 1e3,
    }
    for mode in ("eager", "compiled"):
        for kind in ("forward", "forward_backward"):
            torch_us = out.get(f"{mode}_tpu_kernels_flash_{kind}_us")
            if torch_us is not None:  # above 1: torch faster than the JAX layer
                out[f"{mode}_{kind}_speed_vs_jax"] = round(out["jax_layer"][f"{kind}_us"] / torch_us, 3)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--profile-out")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--skip-layer", action="store_true")
    args = ap.parse_args(argv)
    import tpu_kernels  # noqa: F401
    from tpu_kernels.runtime.devices import tpu as tpu_device

    tpu_device.torch_tpu_pallas()
    record: dict[str, Any] = {
        "kind": "torch_tpu_bench",
        "date": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "device": torch.tpu.get_device_name(),  # type: ignore[attr-defined]
        "commit": _commit(),
        "versions": _versions(),
    }

    def save() -> None:  # after each section: a later section's failure keeps what came before
        with open(args.out, "w") as f:
            json.dump(record, f, indent=1)
            f.write("\n")

    record["per_call"] = measure_per_call(n=50 if args.quick else 200, rounds=5)
    save()
    print(json.dumps(record["per_call"], indent=1), flush=True)
    if args.profile_out:
        with open(args.profile_out, "w") as f:
            f.write(profile_call(300))
    if not args.skip_layer:
        # the layer against the JAX layer first: the main layer ends with torch_tpu's SDPA
        # backward, which has failed on the chip (measure_layer)
        if not args.quick:
            try:
                record["layer_vs_jax"] = measure_vs_jax(
                    rounds=3, progress=lambda o: (record.update(layer_vs_jax=o), save())
                )
            except Exception as e:
                record["layer_vs_jax"] = {"status": "failed", "error": f"{type(e).__name__}: {e}"[:2000]}
                save()
                raise
            print(json.dumps(record["layer_vs_jax"], indent=1), flush=True)
            try:  # where the time goes: the layer's kernels one at a time, torch against JAX
                record["layer_pieces"] = measure_pieces(record["layer_vs_jax"]["dims"], rounds=3)
            except Exception as e:
                record["layer_pieces"] = {"status": "failed", "error": f"{type(e).__name__}: {e}"[:2000]}
            save()
        dims = (
            dict(tokens=512, d=1024, heads=8, kv_heads=2, head_dim=128, ffn=2048)
            if args.quick
            else dict(tokens=4096, d=4096, heads=32, kv_heads=8, head_dim=128, ffn=14336)
        )
        try:
            record["layer"] = measure_layer(
                dims, rounds=3, progress=lambda o: (record.update(layer=o), save())
            )
        except Exception as e:  # recorded, and the exit status says so
            record["layer"] = {"status": "failed", "error": f"{type(e).__name__}: {e}"[:2000]}
            save()
            raise
        print(json.dumps(record["layer"], indent=1), flush=True)
    save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
