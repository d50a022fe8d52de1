"""Start-up: a fresh process's time to the first result of each shipped kernel, cold and warm.

For each registered kernel family's op (tpu_kernels.kernels.FAMILIES; float32, on the first
of the family's TEST shapes, with the family's kwargs) it runs

  cold   a new process with an empty on-disk kernel cache (TPU_KERNELS_CACHE_DIR),
  warm   a second new process on the same cache directory,

and splits the first call into tracing, lowering and XLA compile (JAX's own duration
events, `jax.monitoring`: /jax/core/compile/jaxpr_trace_duration,
jaxpr_to_mlir_module_duration, backend_compile_duration), the rest of the first call
("other": tpu_kernels' keying and conversions, reading the cache, running) and the
imports: `import torch, jax`, then `from tpu_kernels import kernels` on top.

Goals: the warm first call at most 30% of the cold one (issue 22: a warm process traces the
kernel, since the cache keys by the traced program, and skips lowering and compiling);
tpu_kernels' own import at most 0.3 s over `import torch, jax` (issue 12). Figures are
printed, not asserted.

    python bench/startup.py [--kernels softmax,matmul] [--repeat N] [--json PATH]   (op names)

It is a plain script, not a `tpu-kernels bench` suite: it times new processes, not
repeated calls, and takes a minute or more (each process imports torch and JAX).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _child import finish, run_child

EVENTS = {
    "/jax/core/compile/jaxpr_trace_duration": "trace",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
    "/jax/core/compile/backend_compile_duration": "compile",
}
WARM_GOAL = 0.30  # the warm first call over the cold one
PHASES = ("imports", "tk_import", "trace", "lower", "compile", "other", "first_call")


def child(kernel: str) -> dict:
    """Runs in the fresh process: import, one first call, the phases as JSON."""
    t0 = time.perf_counter()
    import jax  # noqa: F401
    import torch

    t1 = time.perf_counter()
    from tpu_kernels import kernels

    t2 = time.perf_counter()
    phases = dict.fromkeys(EVENTS.values(), 0.0)

    def on_duration(event: str, seconds: float, **kwargs) -> None:
        if event in EVENTS:
            phases[EVENTS[event]] += seconds

    jax.monitoring.register_event_duration_secs_listener(on_duration)
    torch.manual_seed(0)
    [family] = [f for f in kernels.FAMILIES.values() if f.op.short_name == kernel]
    [args, *_] = family.test_inputs().values()

    def call():
        return family.op(*args, **family.kwargs)

    t3 = time.perf_counter()
    out = call()
    first = time.perf_counter() - t3
    assert torch.isfinite(out if isinstance(out, torch.Tensor) else out[0]).all()
    from tpu_kernels.runtime import cache

    result = {
        "imports": t1 - t0,
        "tk_import": t2 - t1,
        "first_call": first,
        **phases,
        "other": first - sum(phases.values()),
        "disk": {"hits": cache.STATS.hits, "misses": cache.STATS.misses},
    }
    return result


def _run_child(kernel: str, cache_dir: str) -> dict:
    return run_child(
        __file__, ["--child", kernel], what=f"startup child for {kernel}", cache_dir=cache_dir, timeout=600
    )


def measure(kernels: list[str], repeat: int) -> dict[str, dict[str, list[dict]]]:
    results: dict[str, dict[str, list[dict]]] = {}
    for kernel in kernels:
        runs: dict[str, list[dict]] = {"cold": [], "warm": []}
        for _ in range(repeat):
            with tempfile.TemporaryDirectory(prefix="tpu-kernels-startup-") as d:
                runs["cold"].append(_run_child(kernel, d))
                runs["warm"].append(_run_child(kernel, d))
            print(f"  {kernel}: cold {runs['cold'][-1]['first_call']:.3f} s, "
                  f"warm {runs['warm'][-1]['first_call']:.3f} s", file=sys.stderr)  # fmt: skip
        results[kernel] = runs
    return results


def _median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def table(results: dict[str, dict[str, list[dict]]]) -> str:
    head = "| kernel | cache | imports (torch, jax) | + tpu_kernels | trace | lower | compile | other | first call | warm/cold |"
    lines = [head, "|" + "---|" * 10]
    for kernel, runs in results.items():
        cold = _median(runs["cold"], "first_call")
        for state in ("cold", "warm"):
            r = runs[state]
            cells = [f"{_median(r, p):.3f}" for p in PHASES]
            ratio = f"{_median(r, 'first_call') / cold:.1%}" if state == "warm" else ""
            lines.append(f"| {kernel} | {state} | " + " | ".join(cells) + f" | {ratio} |")
    return "\n".join(lines)


def goals(results: dict[str, dict[str, list[dict]]]) -> list[str]:
    out = []
    for kernel, runs in results.items():
        ratio = _median(runs["warm"], "first_call") / _median(runs["cold"], "first_call")
        out.append(
            f"{kernel}: warm first call {ratio:.1%} of cold (goal <= {WARM_GOAL:.0%}): "
            + ("met" if ratio <= WARM_GOAL else "MISSED")
        )
    tk = statistics.median(r["tk_import"] for runs in results.values() for s in runs.values() for r in s)
    out.append(
        f"tpu_kernels import over torch+jax: {tk:.2f} s (goal <= 0.3 s): {'met' if tk <= 0.3 else 'MISSED'}"
    )
    return out


def kernel_names() -> list[str]:
    """Every registered kernel family's op name (imports the kernels in this process)."""
    from tpu_kernels.kernels import FAMILIES

    return [f.op.short_name for f in FAMILIES.values()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kernels", help="comma-separated op names, default: every registered family's")
    p.add_argument("--repeat", type=int, default=1, help="cold/warm pairs per kernel (medians are shown)")
    p.add_argument("--json", type=Path, help="write the raw figures here")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child)))
        return 0
    known = kernel_names()
    kernels = [k for k in args.kernels.split(",") if k] if args.kernels else known
    unknown = sorted(set(kernels) - set(known))
    if unknown:
        p.error(f"unknown kernels {unknown}; choose from {', '.join(known)}")
    print(
        f"timing {len(kernels)} kernels x {args.repeat} cold/warm pairs of fresh processes...",
        file=sys.stderr,
    )
    results = measure(kernels, args.repeat)
    print("seconds, medians; 'other' is the first call minus JAX's trace/lower/compile events")
    print(table(results))
    print()
    return finish(goals(results), results, args.json)


if __name__ == "__main__":
    sys.exit(main())
