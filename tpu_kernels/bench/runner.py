"""Run benchmarks: inputs, correctness, timing, roofline, speed-ups -> a Report."""

from __future__ import annotations

import statistics
import time
import traceback
from collections.abc import Callable, Sequence

import torch

from tpu_kernels import environment
from tpu_kernels.bench import correctness, roofline, timing
from tpu_kernels.bench.device import Device, last_level_cache_bytes
from tpu_kernels.bench.results import CandidateResult, PointResult, Report
from tpu_kernels.bench.spec import Benchmark, Point, jsonable, point_id
from tpu_kernels.bench.stats import Summary
from tpu_kernels.runtime import devices

AGREEMENT = 0.10
"""A candidate's median and a plain loop over one input set that differ by more than this get a
note in the report saying what was measured, with both figures (`rotation_note`)."""

CPU_NOTE = (
    "CPU: Pallas kernels run in JAX's interpreter here, so these timings do not predict TPU "
    "speed and no roofline is given; they compare the bridge and the baselines on this machine."
)


def timer_description(device: Device, settings: timing.Settings) -> str:
    clock = {"cuda_events": "CUDA events (wall clock for JAX results)", "wall": "wall clock"}[
        devices.get(device.type).clock
    ]
    text = f"{clock} per call, between device synchronisations, over batches of >= {settings.min_sample_s * 1e3:g} ms"
    if settings.device_time:
        text += "; device_time_s from a jax.profiler trace"
    return text


class Progress:
    """What the runner reports while it works (the console shows a progress bar in a
    terminal, one line per finished point elsewhere)."""

    def start(self, total: int, points: int = 0) -> None: ...

    def point(self, benchmark: str, point: str) -> None: ...

    def advance(self, candidate: str | None = None) -> None: ...

    def finished(self, result: PointResult) -> None: ...

    def stop(self) -> None: ...


def run(
    benchmarks: Sequence[Benchmark],
    device: Device,
    settings: timing.Settings,
    *,
    quick: bool = False,
    reduced: bool = False,
    progress: Progress | None = None,
    now: Callable[[], float] | None = None,
) -> Report:
    """Every point of every benchmark's sweep: `quick_points` with `quick`, else `reduced_points`
    with `reduced` (where a benchmark has them), else `points`."""
    progress = progress or Progress()
    sweep = "quick" if quick else "reduced" if reduced else "full"
    report = Report(
        environment=environment.snapshot(),
        device=device.to_dict(),
        settings={**settings.to_dict(), "quick": quick, "sweep": sweep},
        timer=timer_description(device, settings),
        notes=[CPU_NOTE] if device.type == "cpu" else [],
    )
    plan = [(b, p) for b in benchmarks for p in b.sweep(quick, reduced=reduced)]
    total = sum(len(b.candidates(p)) * settings.rounds for b, p in plan)
    clock = now or time.perf_counter
    progress.start(total, len(plan))
    try:
        for bench, point in plan:
            progress.point(bench.name, point_id(point))
            t0 = clock()
            report.results.append(run_point(bench, point, device, settings, progress, now))
            report.results[-1].wall_s = clock() - t0
            progress.finished(report.results[-1])
    finally:
        progress.stop()
    return report


def run_point(
    bench: Benchmark,
    point: Point,
    device: Device,
    settings: timing.Settings,
    progress: Progress,
    now: Callable[[], float] | None = None,
) -> PointResult:
    result = PointResult(bench.name, jsonable(point), point_id(point), baseline=bench.baseline)
    first = bench.inputs(point, device.torch_device)
    default_rotate = 2 * last_level_cache_bytes() if device.type == "cpu" else 256 << 20
    sets = [first] + timing.input_sets(
        lambda: bench.inputs(point, device.torch_device), timing.nbytes(first), settings, default_rotate
    )[1:]
    result.input_sets = len(sets)
    result.input_sets_bytes = sum(timing.nbytes(s) for s in sets)
    result.flops, result.bytes, result.cost_source = _cost(bench, point)
    judge = correctness.for_point(bench, point, first)
    measured: dict[str, tuple[correctness.Errors, torch.dtype]] = {}  # judged once all have run

    clock = now or time.perf_counter
    runnable: dict[str, tuple[Callable, list[tuple]]] = {}
    first_call: dict[str, float] = {}
    for cand in bench.candidates(point):
        res = CandidateResult(cand.name, cand.implementation, cand.primary)
        result.candidates.append(res)
        try:
            prepared = [cand.prepare(s) if cand.prepare else s for s in sets]
            # The very first call: tracing and compiling included (JAX, Dynamo, Helion), as a
            # user's first call of this shape would see it.
            device.synchronize()
            t0 = clock()
            out = cand.fn(*prepared[0])
            device.synchronize(out)
            first_call[cand.name] = clock() - t0
            if judge is not None:
                measured[cand.name] = judge.measure(out, cand.to_torch)
            runnable[cand.name] = (cand.fn, prepared)
        except Exception as e:  # a baseline that cannot run here is reported, not fatal
            res.error = f"{type(e).__name__}: {e}".splitlines()[0][:300]
            res.check = None
            _skip(progress, settings.rounds, cand.name)
            if cand.primary:
                res.error += " | " + traceback.format_exc(limit=3).replace("\n", " ")[:500]

    checks = judge.verdicts(measured) if judge is not None else {}
    for res in result.candidates:
        if res.name in checks:
            res.check = checks[res.name].to_dict()

    now_kw = {"now": now} if now else {}
    timings = timing.measure(device, runnable, settings, on_sample=progress.advance, **now_kw)
    peaks = device.peaks
    for res in result.candidates:
        t = timings.get(res.name)
        if t is None:
            continue
        summary = Summary.of(t.samples)
        res.time = summary.to_dict()
        res.calls_per_sample = t.calls_per_sample
        res.warmup_calls = t.warmup_calls
        res.first_call_s = first_call.get(res.name, t.first_call_s)
        fn, prepared = runnable[res.name]
        if len(prepared) > 1:
            # What a plain loop over one input set gives (a user's quick timing): inputs
            # that stay in the cache, and for tpu_kernels one tensor object (one view).
            timing.run_calls(device, fn, prepared[:1], timing.lead_calls(summary.median, settings))
            res.single_input_s = statistics.median(
                timing.time_calls(device, fn, prepared[:1], t.calls_per_sample, **now_kw) for _ in range(3)
            )
            ratio = summary.median / res.single_input_s if res.single_input_s else None
            if ratio is not None and abs(ratio - 1) > AGREEMENT:
                cache = last_level_cache_bytes() if device.type == "cpu" else None
                res.notes.append(
                    rotation_note(
                        len(prepared),
                        result.input_sets_bytes,
                        cache,
                        summary.median,
                        res.single_input_s,
                        res.primary,
                    )
                )
        res.throughput = roofline.throughput(summary.median, result.flops, result.bytes, peaks)
        if settings.device_time and devices.get(device.type).device_time:
            from tpu_kernels.bench import profile

            fn, prepared = runnable[res.name]
            res.device_time_s = profile.device_seconds_per_call(device, fn, prepared, t.calls_per_sample)
    base = result.candidate(bench.baseline)
    if base is not None and base.median:
        for res in result.candidates:
            if res.median:
                res.speedup = base.median / res.median
    return result


def rotation_note(
    sets: int, sets_bytes: int, cache_bytes: int | None, median: float, single: float, primary: bool
) -> str:
    """What the rotation comparison measured, in words, either way: the median over `sets`
    rotating input sets against a plain loop over one set (`single`, per call). Slower with
    rotation is what caching predicts; faster is not, and the note does not pretend otherwise."""
    from tpu_kernels.bench.stats import fmt_time

    where = ""
    if cache_bytes:
        where = f", {'more than' if sets_bytes > cache_bytes else 'within'} the {_mib(cache_bytes)} last-level cache"
    text = (
        f"{sets} rotating input sets ({_mib(sets_bytes)} in all{where}): {fmt_time(median)} per call, "
        f"{median / single:.2f}x the {fmt_time(single)} of a plain loop over one set"
    )
    if median > single:
        text += "; slower with rotation, as when inputs are no longer cached between calls"
    else:
        text += "; faster with rotation, which colder caches cannot explain (the cause was not measured)"
    if primary:
        text += "; each set's tensors also have their own cached views"
    return text


def _skip(progress: Progress, n: int, candidate: str) -> None:
    for _ in range(n):
        progress.advance(candidate)


def _cost(bench: Benchmark, point: Point) -> tuple[float | None, float | None, str | None]:
    if bench.flops or bench.bytes:
        return (
            bench.flops(point) if bench.flops else None,
            bench.bytes(point) if bench.bytes else None,
            "formula",
        )
    if bench.cost_fn:
        try:
            cost = bench.cost_fn(point)
        except Exception:
            cost = None
        if cost:
            return cost
    return None, None, None


def _mib(n: int) -> str:
    return f"{n / 2**20:.3g} MiB"
