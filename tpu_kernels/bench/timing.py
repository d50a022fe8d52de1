"""How a candidate is timed.

1. Warm-up: call until compilation is out of the numbers: at least
   `warmup_calls` calls, and until the latest call is within 20% of the fastest
   one after the first (or `warmup_s` has passed).
2. Calibrate: calls per sample so that one sample lasts at least `min_sample_s`.
3. Rounds: `rounds` interleaved rounds; each round takes one sample of every
   candidate (in an order rotated every round), so drift hits all alike. Each
   sample starts after an untimed lead-in of the same candidate (`lead_in_s` of its
   calls, at least one), so what the previous candidate leaves behind is not timed as
   this one's: on CPU, torch's OpenMP workers and XLA's thread pool each keep spinning
   for milliseconds after their work and hold the cores the other needs (the figures,
   with and without it: docs/benchmarking.md, "Agreement with a plain loop").
4. Rotating inputs: the calls cycle through several input sets whose total size
   exceeds the cache (`rotate_bytes`), so data left in a cache by the previous
   call does not flatter a kernel.

A sample is the wall time of `calls` calls between two synchronisations, divided
by `calls`; on CUDA, CUDA events bracket the calls instead.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import jax
import torch

from tpu_kernels.bench.device import Device
from tpu_kernels.runtime import devices


@dataclass(frozen=True)
class Settings:
    """How `measure` times candidates (the steps in this module's docstring); `tpu-kernels
    bench --quick` takes QUICK's rounds, sample length and warm-up time, a reduced run (a CPU's
    default) REDUCED's rounds and warm-up time (`for_sweep`)."""

    rounds: int = 10  # interleaved rounds; each takes one sample of every candidate
    min_sample_s: float = 0.02  # a sample's shortest duration: calls per sample are calibrated to it
    warmup_s: float = 2.0  # warm-up stops after this long even if the calls are not steady yet
    warmup_calls: int = 3  # warm-up makes at least this many calls (and at least 2) ...
    max_warmup_calls: int = 200  # ... and at most this many, even within warmup_s
    rotate_bytes: int | None = None  # None: twice the last-level cache on CPU, 256 MiB elsewhere
    max_input_sets: int = 16  # at most this many rotating input sets, whatever rotate_bytes asks
    lead_in_s: float = 0.02  # untimed calls of the same candidate before each sample (at least one)
    device_time: bool = False  # also read device time from a jax.profiler trace (TPU)

    def to_dict(self) -> dict:
        return asdict(self)


QUICK = Settings(rounds=5, min_sample_s=0.005, warmup_s=0.5)
# The reduced sweep (a CPU's default run): the same samples as a full run, half as many rounds
# and a shorter warm-up cap; most of a CPU run is compiling and the interpreter, not the rounds.
REDUCED = Settings(rounds=5, warmup_s=1.0)


def quick(settings: Settings) -> Settings:
    return replace(settings, rounds=QUICK.rounds, min_sample_s=QUICK.min_sample_s, warmup_s=QUICK.warmup_s)


def reduced(settings: Settings) -> Settings:
    return replace(settings, rounds=REDUCED.rounds, warmup_s=REDUCED.warmup_s)


def for_sweep(sweep: str, settings: Settings | None = None) -> Settings:
    """A sweep's default settings: QUICK's for "quick", REDUCED's for "reduced", else as given."""
    settings = settings or Settings()
    return quick(settings) if sweep == "quick" else reduced(settings) if sweep == "reduced" else settings


Now = Callable[[], float]


def time_calls(
    device: Device,
    fn: Callable,
    arg_sets: Sequence[tuple],
    calls: int,
    offset: int = 0,
    now: Now = time.perf_counter,
) -> float:
    """Seconds per call of `calls` calls cycling through `arg_sets`."""
    n = len(arg_sets)
    if devices.get(device.type).clock == "cuda_events":
        return _time_cuda(fn, arg_sets, calls, offset)
    device.synchronize()
    t0 = now()
    out = None
    for i in range(calls):
        out = fn(*arg_sets[(offset + i) % n])
    device.synchronize(out)
    return (now() - t0) / calls


def run_calls(device: Device, fn: Callable, arg_sets: Sequence[tuple], calls: int, offset: int = 0) -> None:
    """`calls` untimed calls cycling through `arg_sets`, finished before returning."""
    n = len(arg_sets)
    out = None
    for i in range(calls):
        out = fn(*arg_sets[(offset + i) % n])
    if calls:
        device.synchronize(out)


def _time_cuda(fn: Callable, arg_sets: Sequence[tuple], calls: int, offset: int) -> float:
    n = len(arg_sets)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    start.record()
    out = None
    for i in range(calls):
        out = fn(*arg_sets[(offset + i) % n])
    end.record()
    jax_leaves = [x for x in jax.tree_util.tree_leaves(out) if isinstance(x, jax.Array)]
    if jax_leaves:  # JAX runs on its own stream: the events do not see it, wall time does
        for leaf in jax_leaves:
            leaf.block_until_ready()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / calls
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / calls


@dataclass
class Timing:
    samples: list[float]  # seconds per call, one per round
    calls_per_sample: int
    warmup_calls: int
    first_call_s: float  # includes compilation


def warm_up(
    device: Device, fn: Callable, arg_sets: Sequence[tuple], settings: Settings, now: Now = time.perf_counter
) -> tuple[float, int, float]:
    """-> (steady per-call estimate, warm-up calls made, first call's time)."""
    durations: list[float] = []
    deadline = now() + settings.warmup_s
    while True:
        durations.append(time_calls(device, fn, arg_sets, 1, offset=len(durations), now=now))
        steady = durations[1:]
        n = len(durations)
        if n >= settings.max_warmup_calls:
            break
        if n >= max(2, settings.warmup_calls) and steady and steady[-1] <= 1.2 * min(steady):
            break
        if n >= max(2, settings.warmup_calls) and now() > deadline:
            break
    estimate = min(durations[1:]) if len(durations) > 1 else durations[0]
    return estimate, len(durations), durations[0]


def calls_for(estimate_s: float, settings: Settings) -> int:
    return max(1, math.ceil(settings.min_sample_s / max(estimate_s, 1e-9)))


def lead_calls(estimate_s: float, settings: Settings) -> int:
    """Untimed calls before each sample: `lead_in_s` worth, at least one (0 with lead_in_s=0)."""
    if settings.lead_in_s <= 0:
        return 0
    return max(1, math.ceil(settings.lead_in_s / max(estimate_s, 1e-9)))


def measure(
    device: Device,
    candidates: dict[str, tuple[Callable, Sequence[tuple]]],
    settings: Settings,
    now: Now = time.perf_counter,
    on_sample: Callable[[str], None] | None = None,
) -> dict[str, Timing]:
    """Warm up and calibrate each candidate, then time them in interleaved rounds.

    `candidates` maps a name to (fn, the argument sets to cycle through); `on_sample` is
    told the candidate's name after each sample (for progress reports)."""
    plans: dict[str, tuple[Callable, Sequence[tuple], int, int]] = {}
    timings: dict[str, Timing] = {}
    for name, (fn, arg_sets) in candidates.items():
        estimate, n_warm, first = warm_up(device, fn, arg_sets, settings, now)
        calls = calls_for(estimate, settings)
        plans[name] = (fn, arg_sets, calls, lead_calls(estimate, settings))
        timings[name] = Timing([], calls, n_warm, first)
    names = list(plans)
    for r in range(settings.rounds):
        for j in range(len(names)):
            name = names[(r + j) % len(names)]
            fn, arg_sets, calls, lead = plans[name]
            run_calls(device, fn, arg_sets, lead, offset=r * calls - lead)
            timings[name].samples.append(time_calls(device, fn, arg_sets, calls, offset=r * calls, now=now))
            if on_sample:
                on_sample(name)
    return timings


def input_sets(
    make: Callable[[], tuple], set_bytes: int, settings: Settings, default_rotate: int
) -> list[tuple]:
    """Enough fresh input sets that together they exceed the cache: at least 2."""
    target = settings.rotate_bytes if settings.rotate_bytes is not None else default_rotate
    n = math.ceil(target / max(set_bytes, 1)) + 1
    n = max(2, min(settings.max_input_sets, n))
    return [make() for _ in range(n)]


def nbytes(values: Any) -> int:
    return sum(
        t.numel() * t.element_size() for t in jax.tree_util.tree_leaves(values) if isinstance(t, torch.Tensor)
    )
