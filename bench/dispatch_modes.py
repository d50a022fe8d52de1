"""Synchronous against asynchronous JAX CPU dispatch, for tpu_kernels calls (issue 40).

tpu_kernels turns JAX's asynchronous CPU dispatch off (tpu_kernels/cpu_client.py): every
call waits for its result, so a worker thread overlaps nothing and costs a wake-up a call.
This script measures what that choice changes, each mode in its own fresh process (JAX reads
the flag once, when it makes its CPU client; `TPU_KERNELS_CPU_ASYNC_DISPATCH=0/1` states the
mode, and tpu_kernels applies it):

  small       a 2-in/1-out @tpu_kernel body (x * 2 + y) at 32x32: time per call, one thread
  large       the same op's kind at a large size (x @ y, 1024x1024 float32): time per call
  threads     each op called from 1 thread, then from 2 threads at once (each thread its
              own tensors): calls per second in all, and whether every result was right
  Ctrl-C      SIGINT sent to a process looping over the large op: seconds from the signal
              to the KeyboardInterrupt in Python, and whether the op is right afterwards

Each figure is the median over fresh processes (3 per mode, the modes alternating so that the
machine's drift hits both alike) of each process's median over its rounds; compare the two
modes, not days.

    python bench/dispatch_modes.py [--processes P] [--rounds R] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

import torch
from _common import per_call_us

from tpu_kernels import cpu_client, tpu_kernel

MODES = {"synchronous": "0", "asynchronous": "1"}
SMALL, LARGE = (32, 32), (1024, 1024)


@tpu_kernel("bench_dispatch::axpy")
def axpy(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x * 2 + y


@tpu_kernel("bench_dispatch::matmul")
def matmul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x @ y


def _ops() -> dict:
    """name -> (op, shape, its torch reference, calls per timed round). Registering an op makes
    no JAX client: each mode's process makes its own at its first call."""
    return {
        "small": (axpy, SMALL, lambda x, y: x * 2 + y, 2000),
        "large": (matmul, LARGE, lambda x, y: x @ y, 20),
    }


def _threads(op, shape, reference, calls: int, n_threads: int) -> tuple[float, bool]:
    """Calls per second with `n_threads` threads each calling `calls` times on its own tensors;
    and whether every thread's every result matched its reference."""
    import threading

    inputs = [(torch.randn(*shape), torch.randn(*shape)) for _ in range(n_threads)]
    wants = [reference(x, y) for x, y in inputs]
    for x, y in inputs:  # warm: compiled, views cached
        for _ in range(3):
            op(x, y)
    right = [True] * n_threads
    start = threading.Barrier(n_threads + 1)

    def work(k: int) -> None:
        x, y = inputs[k]
        start.wait()
        for _ in range(calls):
            out = op(x, y)
        right[k] = torch.allclose(out, wants[k], rtol=1e-4, atol=1e-3)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    return n_threads * calls / (time.perf_counter() - t0), all(right)


def measure(rounds: int) -> dict:
    """This process's figures (its mode is the environment's)."""
    import jax

    torch.manual_seed(0)
    out: dict = {"async_dispatch": None, "ops": {}}
    for name, (op, shape, reference, calls) in _ops().items():
        x, y = torch.randn(*shape), torch.randn(*shape)
        for _ in range(3):
            op(x, y)
        per_call = [per_call_us(lambda op=op, x=x, y=y: op(x, y), calls) for _ in range(rounds)]
        one = [_threads(op, shape, reference, calls, 1) for _ in range(rounds)]
        two = [_threads(op, shape, reference, calls // 2 or 1, 2) for _ in range(rounds)]
        out["ops"][name] = {
            "shape": list(shape),
            "per_call_us": statistics.median(per_call),
            "calls_per_s_1_thread": statistics.median(r for r, _ in one),
            "calls_per_s_2_threads": statistics.median(r for r, _ in two),
            "threads_right": all(ok for _, ok in one + two),
        }
    out["async_dispatch"] = jax.config.read("jax_cpu_enable_async_dispatch")
    return out


def _loop_until_interrupted() -> None:
    """The Ctrl-C child: loop over the large op; on SIGINT, say when Python got it and whether
    the small op is right afterwards."""
    ops = _ops()
    big, shape, _, _ = ops["large"]
    small, small_shape, reference, _ = ops["small"]
    x, y = torch.randn(*shape), torch.randn(*shape)
    a, b = torch.randn(*small_shape), torch.randn(*small_shape)
    small(a, b), big(x, y)
    print("ready", flush=True)
    try:
        while True:
            big(x, y)
    except KeyboardInterrupt:
        got = time.time()
        right = torch.allclose(small(a, b), reference(a, b)) and torch.allclose(big(x, y), x @ y, rtol=1e-4, atol=1e-3)
        print(json.dumps({"interrupted_at": got, "right_after": bool(right)}), flush=True)


def interrupt(env: dict, tries: int) -> dict:
    """SIGINT a process busy with the large op, `tries` times (a fresh process each)."""
    latencies, right = [], []
    for _ in range(tries):
        child = subprocess.Popen(
            [sys.executable, __file__, "--loop"], env=env, stdout=subprocess.PIPE, text=True
        )
        assert child.stdout is not None
        line = child.stdout.readline()
        if line.strip() != "ready":
            child.kill()
            raise SystemExit(f"dispatch_modes: the Ctrl-C child did not start ({line!r})")
        time.sleep(0.5)  # inside the loop
        sent = time.time()
        child.send_signal(signal.SIGINT)
        try:
            result, _ = child.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            child.kill()
            latencies.append(float("inf"))
            right.append(False)
            continue
        data = json.loads(result.strip().splitlines()[-1])
        latencies.append(data["interrupted_at"] - sent)
        right.append(data["right_after"])
    return {"seconds_to_interrupt": statistics.median(latencies), "tries": tries, "right_after": all(right)}


def _environment(mode: str) -> dict:
    return {**os.environ, cpu_client.ENV: MODES[mode], "JAX_PLATFORMS": "cpu", "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}


def _child(mode: str, rounds: int) -> dict:
    done = subprocess.run(
        [sys.executable, __file__, "--child", "--rounds", str(rounds)],
        env=_environment(mode),
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        raise SystemExit(f"dispatch_modes: the {mode} process failed:\n{done.stderr[-3000:]}")
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    if figures["async_dispatch"] != (mode == "asynchronous"):
        raise SystemExit(f"dispatch_modes: the {mode} process ran with async dispatch = {figures['async_dispatch']}")
    return figures


def run_modes(processes: int, rounds: int) -> dict:
    """Both modes, their processes alternating (sync, async, sync, ...) so that the machine's
    drift hits both alike; each figure the median over the processes' medians."""
    runs: dict[str, list[dict]] = {mode: [] for mode in MODES}
    for _ in range(processes):
        for mode in MODES:
            runs[mode].append(_child(mode, rounds))
    figures = {}
    for mode, results in runs.items():
        ops = {}
        for name in results[0]["ops"]:
            each = [r["ops"][name] for r in results]
            ops[name] = {
                "shape": each[0]["shape"],
                **{
                    k: statistics.median(e[k] for e in each)
                    for k in ("per_call_us", "calls_per_s_1_thread", "calls_per_s_2_threads")
                },
                "threads_right": all(e["threads_right"] for e in each),
            }
        figures[mode] = {"async_dispatch": mode == "asynchronous", "processes": processes, "ops": ops}
    for mode in MODES:
        figures[mode]["ctrl_c"] = interrupt(_environment(mode), tries=3)
    return figures


def table(figures: dict) -> str:
    """Both modes side by side, as markdown (what the generated performance page shows)."""
    sync, asy = figures["synchronous"], figures["asynchronous"]
    lines = [
        "| measure | synchronous (tpu_kernels' default) | asynchronous (JAX's default) | sync / async |",
        "|---|---|---|---|",
    ]

    def row(label: str, a: float, b: float, unit: str, digits: int = 1) -> None:
        lines.append(f"| {label} | {a:.{digits}f} {unit} | {b:.{digits}f} {unit} | {a / b:.2f} |")

    for name, op in sync["ops"].items():
        other = asy["ops"][name]
        size = "x".join(map(str, op["shape"]))
        kind = "x * 2 + y" if name == "small" else "x @ y"
        row(f"{kind} {size}: time per call", op["per_call_us"], other["per_call_us"], "us")
        row(f"{kind} {size}: calls/s, 1 thread", op["calls_per_s_1_thread"], other["calls_per_s_1_thread"], "", 0)
        row(f"{kind} {size}: calls/s, 2 threads", op["calls_per_s_2_threads"], other["calls_per_s_2_threads"], "", 0)
    row(
        "Ctrl-C during x @ y: seconds to KeyboardInterrupt",
        sync["ctrl_c"]["seconds_to_interrupt"],
        asy["ctrl_c"]["seconds_to_interrupt"],
        "s",
        3,
    )
    right = all(
        m["ctrl_c"]["right_after"] and all(op["threads_right"] for op in m["ops"].values()) for m in (sync, asy)
    )
    lines.append("")
    lines.append(
        "Every result from the threads and after each Ctrl-C was right in both modes."
        if right
        else "WRONG RESULTS: a thread's result or a result after Ctrl-C did not match its reference."
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, default=3, help="fresh processes per mode, alternating")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per figure in each process (median)")
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--loop", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.loop:
        _loop_until_interrupted()
        return
    if args.child:
        print(json.dumps(measure(args.rounds)), flush=True)
        # Leave without the interpreter's teardown: in asynchronous mode it sometimes aborts
        # there ("terminate called without an active exception": 1 of 20 children under load,
        # none of 20 synchronous ones nor of 50 plain-JAX processes doing the same calls from two
        # threads), after every figure is out. What it measures is done; the parent reads the
        # figures, and the exit status says whether they were written.
        sys.stderr.flush()
        os._exit(0)
    figures = run_modes(args.processes, args.rounds)
    print(table(figures))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=2)


if __name__ == "__main__":
    main()
