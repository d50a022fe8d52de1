"""Variable lengths: rmsnorm over 24 random sequence lengths in 1-512, with and without buckets.

Each length is a new shape, and each new shape is a new executable (trace, lower, XLA
compile). The shipped rmsnorm pads its rows to buckets (`buckets=`, docs/buckets.md:
8, 16, 32, 64, 128 rows of float32, then multiples of 128), so the 24 lengths need at
most 8 executables; the same Pallas kernel
registered without `buckets=` ("exact") compiles once per distinct length.

For each mode a fresh process (the on-disk kernel cache off, so every executable is
really built) calls the op once per length, in the same seeded order, and reports the
executables built (the op's `cache_info().misses`), JAX's XLA compiles (its
backend_compile events), the total time of the 24 calls, and the largest difference
from the other mode's results (the padded rows must change nothing).

Goal (issue 12): at most one compile per bucket. Figures are printed, not asserted.

    python bench/varlen.py [--lengths 24] [--max-len 512] [--hidden 256] [--backward] [--repeat N] [--json PATH]

A plain script, not a `tpu-kernels bench` suite: it times first calls in new processes.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

from _child import finish, run_child

SEED = 0
MODES = ("exact", "buckets")


def lengths(n: int, max_len: int, seed: int = SEED) -> list[int]:
    """`n` random lengths in 1..max_len, fixed by the seed (repeats allowed, as in real traffic)."""
    rng = random.Random(seed)
    return [rng.randint(1, max_len) for _ in range(n)]


def _ops():
    """The shipped (bucketed) rmsnorm, and the same kernel without buckets."""
    from tpu_kernels import registered_ops, tpu_kernel
    from tpu_kernels.kernels.rmsnorm import pallas, rmsnorm

    exact = registered_ops().get("varlen_bench::rmsnorm_exact")
    if exact is None:
        exact = tpu_kernel("varlen_bench::rmsnorm_exact", outputs=("y", "inv_rms"), residuals=("inv_rms",))(
            pallas.rmsnorm
        )
        exact.def_backward(pallas.rmsnorm_backward)
    return {"exact": exact, "buckets": rmsnorm}


def run(mode: str, lens: list[int], hidden: int, backward: bool = False) -> dict:
    """Call the mode's op once per length (in this process); counts, time, a result digest."""
    import jax
    import torch

    op = _ops()[mode]
    op.cache_clear()
    if backward:
        op.backward_op.cache_clear()
    compiles = [0]

    def on_duration(event: str, seconds: float, **kwargs) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            compiles[0] += 1

    jax.monitoring.register_event_duration_secs_listener(on_duration)
    gen = torch.Generator().manual_seed(SEED)
    w = torch.randn(hidden, generator=gen)
    inputs = [torch.randn(n, hidden, generator=gen) for n in lens]
    sums = []
    t0 = time.perf_counter()
    for x in inputs:
        if backward:
            x.requires_grad_(True)
            y = op(x, w)
            y.sum().backward()
            sums.append(float(x.grad.double().abs().sum()))
        else:
            y = op(x, w)
        sums.append(float(y.detach().double().abs().sum()))
    total = time.perf_counter() - t0
    try:
        jax.monitoring.unregister_event_duration_listener(on_duration)
    except (AttributeError, ValueError):  # pragma: no cover - older JAX: the process ends soon anyway
        pass
    result = {
        "mode": mode,
        "calls": len(lens),
        "distinct_lengths": len(set(lens)),
        "executables": op.cache_info().misses,
        "xla_compiles": compiles[0],
        "seconds": total,
        "sums": sums,
    }
    if backward:
        result["backward_executables"] = op.backward_op.cache_info().misses
    return result


def expected_buckets(lens: list[int]) -> int:
    from tpu_kernels.dispatch.buckets import bucket_size
    from tpu_kernels.kernels import rmsnorm

    rows = rmsnorm.options.buckets["x"][-2]  # as the op declares them
    return len({bucket_size(n, rows) for n in lens})


def _run_child(mode: str, args: argparse.Namespace) -> dict:
    cmd = ["--child", mode, "--lengths", str(args.lengths), "--max-len", str(args.max_len),
           "--hidden", str(args.hidden)] + (["--backward"] if args.backward else [])  # fmt: skip
    # cache "off": every executable is built, none read from disk
    return run_child(__file__, cmd, what=f"varlen child ({mode})", cache_dir="off", timeout=900)


def report(runs: dict[str, list[dict]], lens: list[int], max_len: int) -> list[str]:
    n_buckets = expected_buckets(lens)
    lines = [
        f"{len(lens)} random lengths in 1-{max_len} (seed {SEED}): {len(set(lens))} distinct, "
        f"{n_buckets} buckets of rmsnorm's rows",
        "| mode | executables | XLA compiles | total seconds (median) |",
        "|---|---|---|---|",
    ]
    for mode, rs in runs.items():
        secs = statistics.median(r["seconds"] for r in rs)
        lines.append(f"| {mode} | {rs[0]['executables']} | {rs[0]['xla_compiles']} | {secs:.2f} |")
    if "exact" in runs and "buckets" in runs:
        a, b = runs["exact"][0]["sums"], runs["buckets"][0]["sums"]
        diff = max(abs(x - y) / max(abs(x), 1e-30) for x, y in zip(a, b))
        lines.append(f"largest relative difference of the results' abs-sums, buckets vs exact: {diff:.2e}")
        b0 = runs["buckets"][0]
        ok = b0["executables"] <= n_buckets
        lines.append(
            f"goal: at most one compile per bucket: {b0['executables']} executables for {n_buckets} "
            f"buckets: {'met' if ok else 'MISSED'}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", type=int, default=24, help="how many random lengths (default 24)")
    p.add_argument("--max-len", type=int, default=512, help="lengths are drawn from 1..max-len (default 512)")
    p.add_argument("--hidden", type=int, default=256, help="the normalized dim (default 256)")
    p.add_argument("--backward", action="store_true", help="also run the backward per length")
    p.add_argument("--repeat", type=int, default=1, help="fresh processes per mode (medians are shown)")
    p.add_argument("--json", type=Path, help="write the raw figures here")
    p.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    lens = lengths(args.lengths, args.max_len)
    if args.child:
        print(json.dumps(run(args.child, lens, args.hidden, args.backward)))
        return 0
    runs: dict[str, list[dict]] = {m: [] for m in MODES}
    for _ in range(args.repeat):
        for mode in MODES:
            runs[mode].append(_run_child(mode, args))
            print(f"  {mode}: {runs[mode][-1]['seconds']:.2f} s", file=sys.stderr)
    figures = {"lengths": lens, "max_len": args.max_len, "runs": runs}  # what `report` reads
    return finish(report(runs, lens, args.max_len), figures, args.json)


if __name__ == "__main__":
    sys.exit(main())
