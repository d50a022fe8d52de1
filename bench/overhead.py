"""Per-call overhead of the torch <-> JAX bridge, on the CPU.

Times, interleaved in one run, a 2-input/1-output add through:

  direct     the jitted JAX function on already-converted JAX arrays (the floor)
  tpu_kernels, same tensors   the registered op, called again and again on the same
             tensors (the DLPack views are cached, as for weights)
  tpu_kernels, fresh tensors  the op on new tensor objects every call (as for
             activations: every input is imported by DLPack)
  naive      a torch.library.custom_op whose body uses the public
             jax.dlpack.from_dlpack / torch.from_dlpack, with no caching of its own

and the pieces of a call, to show where the time goes. Target (issue #2): at
most 30 us over `direct`, and at least 5x less overhead than `naive`.

Then, per op (`op_cases`: every shipped op and a Tokamax op at 128x256, and a 2-input,
1-output JAX body at 32x32), interleaved, each waiting for its result:

  op         the op called from torch on the same tensors
  floor      the least any bridge does around the op's JAX call: each tensor's cached view,
             the call, each output exported to torch
  direct     the op's own JAX function (`op.jax_function`, the same kernel and statics) on
             JAX arrays, waited for with `out.block_until_ready()` (JAX's fastest wait here:
             `jax.block_until_ready(out)` walks a pytree first)

and their ratios: op/floor is what tpu_kernels' own Python costs (goal, issue 40: within
1.15x), op/direct what the whole crossing costs (goal, issue 24: within 1.5x, stretch 1.3x).
Ratios, not microseconds, compare across days on this machine. `--json PATH` writes every
figure (the per-op rows under "ops") for generated pages.

    python bench/overhead.py [--calls N] [--rounds R] [--json PATH]   # with the pieces
    tpu-kernels bench overhead                                        # in the harness
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from collections.abc import Callable

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import torch  # noqa: E402
from _common import per_call_us  # noqa: E402

from tpu_kernels import tpu_kernel  # noqa: E402
from tpu_kernels.runtime import bridge

SHAPE = (128, 128)


@tpu_kernel("bench_overhead::add")
def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x + y


_jitted = jax.jit(lambda a, b: a + b)


@torch.library.custom_op("bench_overhead::naive_add", mutates_args=())
def naive_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    a, b = jax.dlpack.from_dlpack(x), jax.dlpack.from_dlpack(y)
    return torch.from_dlpack(_jitted(a, b))


@naive_add.register_fake
def _(x, y):
    return torch.empty_like(x)


def benchmarks(quick: bool, device_type: str) -> list:
    """The same comparison in the harness (per-call times; every candidate waits for its result)."""
    from tpu_kernels import bench

    if device_type != "cpu":
        return []  # the bridge measured here is the CPU one

    def fresh(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        # new tensor objects over the same memory each call: the view cache cannot hit
        return add(x.view(x.shape), y.view(y.shape))

    return [
        bench.Benchmark(
            name="overhead",
            description="per-call overhead of the torch <-> JAX bridge on a 2-input add",
            points=[{"shape": SHAPE, "dtype": torch.float32}],
            inputs=lambda p, dev: (
                torch.randn(*p["shape"], device=dev),
                torch.randn(*p["shape"], device=dev),
            ),
            candidates=lambda p: [
                bench.Candidate("tpu_kernels, same tensors", add, primary=True),
                bench.Candidate("tpu_kernels, fresh tensors", fresh),
                bench.Candidate(
                    "jax direct",
                    lambda a, b: _jitted(a, b).block_until_ready(),
                    prepare=lambda xs: tuple(bridge.to_jax_cpu(t) for t in xs),
                    to_torch=lambda a: torch.from_dlpack(a),
                ),
                bench.Candidate("naive bridge", naive_add),
            ],
            reference=lambda x, y: x + y,
            baseline="jax direct",
        )
    ]


@tpu_kernel("bench_overhead::add_small")
def add_small(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x + y


RATIO_GOAL, RATIO_STRETCH = 1.5, 1.3


def _shape_text(shape) -> str:
    """(128, 256) -> 128x256; nested shapes (several inputs') joined by ' & '."""
    if shape and isinstance(shape[0], tuple):
        return " & ".join(_shape_text(s) for s in shape)
    return "x".join(map(str, shape))


def op_cases() -> dict[str, tuple[Callable[[], object], ...]]:
    """name -> (the op called from torch, its JAX function called on JAX arrays, the floor).

    The floor is the least any bridge does around that JAX call: each tensor's cached view
    (`bridge.VIEWS.get`), the call, each output exported to torch (which waits for it). What
    the op costs above the floor is tpu_kernels' Python (checks, cache key, dispatch)."""
    import tpu_kernels.tokamax as tk
    from tpu_kernels import kernels
    from tpu_kernels.tokamax.normalization.op import layer_norm_op

    torch.manual_seed(0)
    x, w = torch.randn(128, 256), torch.randn(256)
    a, b = torch.randn(32, 32), torch.randn(32, 32)
    cases = {
        "@tpu_kernel body, 2-in/1-out, 32x32": (add_small, (a, b), {}, add_small, {}),
        # every registered kernel family's op, at its shapes.OVERHEAD (the 128x256;
        # a family without one: the first of its TEST shapes)
        **{
            f"{family.op.short_name} {_shape_text(shape)}": (
                family.op,
                family.inputs(shape, torch.float32, torch.device("cpu")),
                dict(family.kwargs),
                family.op,
                dict(family.kwargs),
            )
            for family in kernels.FAMILIES.values()
            for shape in [getattr(family.shapes, "OVERHEAD", None) or next(iter(family.shapes.TEST.values()))]
        },
        "tokamax.rms_norm 128x256 (xla)": (
            tk.rms_norm,
            (x, w),
            {},
            layer_norm_op,
            # what tk.rms_norm passes its op on a CPU tensor
            {"dim": -1, "eps": 1e-6, "scale_offset": 0.0, "subtract_mean": False, "implementation": "xla"},
        ),
    }
    out = {}
    for name, (call, args, kwargs, op, statics) in cases.items():
        arrays = [bridge.to_jax_cpu(t) for t in args]
        if op is layer_norm_op:
            arrays.append(None)  # no bias
        direct = op.jax_function(**statics)
        extra = [None] * (len(arrays) - len(args))
        for t in args:  # second sighting: the views are cached, as the op's are
            bridge.VIEWS.get(t), bridge.VIEWS.get(t)

        def floor(direct=direct, args=args, extra=extra) -> object:
            views = [bridge.VIEWS.get(t) for t in args]
            return [bridge.to_torch_cpu(r) for r in jax.tree_util.tree_leaves(direct(*views, *extra))]

        out[name] = (
            lambda call=call, args=args, kwargs=kwargs: call(*args, **kwargs),
            waited(direct, arrays),
            floor,
        )
    return out


def waited(fn: Callable, args: list) -> Callable[[], object]:
    """`fn(*args)` and wait for its result, the fastest way JAX offers: the array's own
    `block_until_ready()` for a single array (`jax.block_until_ready` walks a pytree
    first), each leaf's for a tuple or list."""
    if isinstance(fn(*args), jax.Array):
        return lambda: fn(*args).block_until_ready()

    def call() -> object:
        out = fn(*args)
        for leaf in jax.tree_util.tree_leaves(out):
            leaf.block_until_ready()
        return out

    return call


def op_ratios(calls: int, rounds: int) -> list[dict]:
    cases = op_cases()
    candidates = {}
    for name, (ours, direct, floor) in cases.items():
        candidates[f"{name}: op"] = ours
        candidates[f"{name}: direct"] = direct
        candidates[f"{name}: floor"] = floor
    samples = measure(candidates, calls, rounds)
    rows = []
    for name in cases:
        ours = statistics.median(samples[f"{name}: op"])
        direct = statistics.median(samples[f"{name}: direct"])
        floor = statistics.median(samples[f"{name}: floor"])
        rows.append(op_row(name, ours, floor, direct))
    return rows


def op_row(name: str, op_us: float, floor_us: float, direct_us: float) -> dict:
    """One op's figures and ratios (what --json writes under "ops")."""
    return {
        "name": name,
        "op_us": op_us,
        "floor_us": floor_us,
        "direct_us": direct_us,
        "op_over_floor": op_us / floor_us,
        "op_over_direct": op_us / direct_us,
        "floor_over_direct": floor_us / direct_us,
    }


FLOOR_GOAL = 1.15  # issue 40: the op within 1.15x of its floor


def _worst(ops: list[dict]) -> tuple[float, float]:
    """(the worst op/floor, the worst op/direct): what the goals judge."""
    return max(r["op_over_floor"] for r in ops), max(r["op_over_direct"] for r in ops)


def op_table(ops: list[dict]) -> list[str]:
    """The per-op table and the goals' verdicts, as printed."""
    lines = [
        f"{'op':40s} {'floor us':>9s} {'op us':>9s} {'direct us':>10s} {'op/floor':>9s} {'op/direct':>10s}"
    ]
    lines += [
        f"{r['name']:40s} {r['floor_us']:9.1f} {r['op_us']:9.1f} {r['direct_us']:10.1f} "
        f"{r['op_over_floor']:9.2f} {r['op_over_direct']:10.2f}"
        for r in ops
    ]
    worst_floor, worst = _worst(ops)
    verdict = "met" if worst <= RATIO_GOAL else "MISSED"
    stretch = "met" if worst <= RATIO_STRETCH else "missed"
    return [
        *lines,
        f"worst op/floor {worst_floor:.2f} (goal <= {FLOOR_GOAL}: {'met' if worst_floor <= FLOOR_GOAL else 'MISSED'})",
        f"worst op/direct {worst:.2f} (goal <= {RATIO_GOAL}: {verdict}; stretch <= {RATIO_STRETCH}: {stretch})",
    ]


_NATIVE_RECORD = (
    "- measured with the eager shortcut's checks in C++ (tpu_kernels/runtime/native, since removed: "
    "the Python checks cost about 3 us more a call)"
)


def op_markdown(ops: list[dict], native: bool | None = None) -> str:
    """The per-op table and the goals' verdicts as markdown (the generated performance page's);
    `native`: a record's `native_checks`, True for one measured while the shortcut's checks
    ran in C++ (tpu_kernels/runtime/native, removed since: docs/performance.md)."""
    rows = [
        f"| {r['name']} | {r['floor_us']:.1f} us | {r['op_us']:.1f} us | {r['direct_us']:.1f} us | "
        f"{r['op_over_floor']:.2f} | {r['op_over_direct']:.2f} |"
        for r in ops
    ]
    worst_floor, worst = _worst(ops)
    floor_met = "met" if worst_floor <= FLOOR_GOAL else "not met"
    direct_met = "met" if worst <= RATIO_GOAL else "not met"
    return "\n".join(
        [
            "| op | floor | op | direct | op / floor | op / direct |",
            "|---|---|---|---|---|---|",
            *rows,
            "",
            f"- worst op / floor: {worst_floor:.2f} (goal: at most {FLOOR_GOAL}, {floor_met})",
            f"- worst op / direct: {worst:.2f} (goal: at most {RATIO_GOAL}, {direct_met}; stretch {RATIO_STRETCH})",
            *([_NATIVE_RECORD] if native else []),
        ]
    )


def measure(candidates: dict[str, Callable[[], object]], calls: int, rounds: int) -> dict[str, list[float]]:
    """Interleaved rounds: each round times every candidate once, so drift hits all alike."""
    for fn in candidates.values():  # warm-up: compile, fill caches
        for _ in range(max(50, calls // 10)):
            fn()
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(rounds):
        for name, fn in candidates.items():
            samples[name].append(per_call_us(fn, calls))
    return samples


def main() -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=2000, help="calls per timed round")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()

    x, y = torch.randn(*SHAPE), torch.randn(*SHAPE)
    ja, jb = bridge.to_jax_cpu(x), bridge.to_jax_cpu(y)
    pool = [(torch.randn(*SHAPE), torch.randn(*SHAPE)) for _ in range(64)]
    pool_jax = [(bridge.to_jax_cpu(a), bridge.to_jax_cpu(b)) for a, b in pool]
    counter = iter(range(10**12))

    def fresh() -> object:
        a, b = pool[next(counter) % len(pool)]
        # new tensor objects over the 64 sets' memory: the view cache cannot hit
        return add(a.view(SHAPE), b.view(SHAPE))

    def direct_rotating() -> object:
        a, b = pool_jax[next(counter) % len(pool_jax)]
        return _jitted(a, b).block_until_ready()

    out = _jitted(ja, jb)
    x_once = torch.randn(*SHAPE)  # its own tensor: .numpy() would pin x's storage
    noop_lib = torch.library.Library("bench_overhead", "FRAGMENT")
    noop_lib.define("noop(Tensor x, Tensor y) -> Tensor")
    noop_lib.impl("noop", lambda a, b: a, "CPU")
    noop = torch.ops.bench_overhead.noop.default
    executor = add._kernels["CPU"]

    candidates = {
        "direct: jitted JAX, same arrays": lambda: _jitted(ja, jb).block_until_ready(),
        "tpu_kernels: same tensors": lambda: add(x, y),
        "direct: jitted JAX, 64 rotating input sets": direct_rotating,
        "tpu_kernels: 64 rotating sets, new tensor objects": fresh,
        "naive bridge: same tensors": lambda: naive_add(x, y),
        "piece: CPU kernel alone (no KernelOp, no dispatcher)": lambda: executor(x, y),
        "piece: torch.ops call (dispatcher, autograd kernel)": lambda: add.overload(x, y),
        "piece: torch op dispatch, no-op Python kernel": lambda: noop(x, y),
        "piece: DLPack import, low level (per tensor)": lambda: bridge.to_jax_cpu(x),
        "piece: DLPack import, public (per tensor)": lambda: jax.dlpack.from_dlpack(x),
        "piece: NumPy view, for a tensor seen once (per tensor)": lambda: bridge.host_view(x),
        # what host_view did before: cheaper, but marks the storage non-resizable for good
        "piece: t.numpy(), for comparison (per tensor)": lambda: x_once.numpy(),
        "piece: view cache hit (per tensor)": lambda: bridge.VIEWS.get(x),
        "piece: DLPack export to torch (per output)": lambda: bridge.to_torch_cpu(out),
        "piece: torch.from_dlpack (per output)": lambda: torch.from_dlpack(out),
        "piece: torch .view() (per tensor, in the rotating case)": lambda: x.view(SHAPE),
    }
    bridge.VIEWS.get(x), bridge.VIEWS.get(y)  # second sighting: cached
    samples = measure(candidates, args.calls, args.rounds)

    med = {name: statistics.median(v) for name, v in samples.items()}
    pairs = {
        "tpu_kernels: same tensors": "direct: jitted JAX, same arrays",
        "naive bridge: same tensors": "direct: jitted JAX, same arrays",
        "tpu_kernels: 64 rotating sets, new tensor objects": "direct: jitted JAX, 64 rotating input sets",
    }
    rows = []
    print(
        f"per-call time, {SHAPE} float32 add, median of {args.rounds} interleaved rounds x {args.calls} calls"
    )
    print(f"{'candidate':56s} {'median us':>10s} {'p10':>8s} {'p90':>8s} {'over direct':>12s}")
    for name, v in samples.items():
        q = statistics.quantiles(v, n=10)
        over = med[name] - med[pairs[name]] if name in pairs else None
        rows.append(
            {"name": name, "median_us": med[name], "p10_us": q[0], "p90_us": q[-1], "overhead_us": over}
        )
        over_s = f"{over:12.1f}" if over is not None else " " * 12
        print(f"{name:56s} {med[name]:10.1f} {q[0]:8.1f} {q[-1]:8.1f} {over_s}")
    naive_over = med["naive bridge: same tensors"] - med["direct: jitted JAX, same arrays"]
    ours = med["tpu_kernels: same tensors"] - med["direct: jitted JAX, same arrays"]
    print(
        f"tpu_kernels adds {ours:.1f} us over the direct call (target <= 30) and "
        f"{naive_over / ours:.1f}x less than the naive bridge (target >= 5)"
    )
    result = {
        "shape": SHAPE,
        "rounds": args.rounds,
        "calls": args.calls,
        "rows": rows,
        "jax": jax.__version__,
        "torch": torch.__version__,
        "low_level_dlpack": bridge.LOW_LEVEL,
        # whether JAX's CPU client hands each call to a worker thread (the flag it was made with)
        "jax_cpu_async_dispatch": jax.config.read("jax_cpu_enable_async_dispatch"),
    }
    ops = op_ratios(max(200, args.calls // 4), args.rounds)
    print()
    print(f"per op, called from torch, on the same tensors (medians of {args.rounds} interleaved rounds)")
    print("(floor: cached views + the JAX call + the outputs' export, the least any bridge does;")
    print(" direct: the op's JAX function on JAX arrays, waited for with out.block_until_ready())")
    print("\n".join(op_table(ops)))
    result["ops"] = ops
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return result


if __name__ == "__main__":
    bridge.cpu_device()  # JAX's CPU client, made as tpu_kernels makes it, before timing
    main()
