"""Run points on the attached chip and turn each into a row of the record.

Most of a large point's wall time is host work: its random inputs (hundreds of MB at the
grid's widest rows), their copy to the chip and the float64 check. `run_points` makes the
next point's inputs and puts them on the chip in a background thread while the current point
compiles and is checked, and waits for that thread before it times a call, so nothing else
runs during a timed call. Each row says how its host time split (`host_s`).

Where XLA compiled a cross-program prefetch into any side of a point (`measure.
cross_program_prefetch`), every side is timed cycling through `measure.ROTATE` on-chip copies
of the inputs (a model does not call one program with one buffer over and over); the row says
so (`rotated`) and keeps each side's same-input time too (`time_same_inputs_s`).

The sides of a point are timed with their rounds interleaved (`measure.time_interleaved`), so a
slow spell of the host's per-call time lands on all of them alike.

A dispatch-bound point (its call mostly the machine's per-call dispatch) is timed again as n
calls inside one program, every side alike: `time_in_program_s` and `speed_in_program_vs_*`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import jax
import numpy as np

from tpu_kernels.chip import measure
from tpu_kernels.chip.point import Point


def _to_device(inputs: tuple) -> list:
    return [jax.device_put(a) for a in inputs]


def prepare(p: Point, seed: int) -> tuple[tuple, list, dict[str, float]]:
    """A point's host inputs (from `seed`), the same on the chip, and the seconds each took."""
    start = time.perf_counter()
    host_inputs = p.make(np.random.default_rng(seed))
    made = time.perf_counter()
    args = jax.block_until_ready(_to_device(host_inputs))
    return host_inputs, args, {"make": round(made - start, 3), "put": round(time.perf_counter() - made, 3)}


class _Ahead:
    """The next point's `prepare` running in a background thread; `wait()` before timing."""

    def __init__(self, future=None):
        self.future = future

    def wait(self) -> None:
        if self.future is not None:
            self.future.exception()  # blocks; an error surfaces when its point is reached


def _kind(p: Point) -> tuple:
    """What decides a point's inputs: its kernel, dtype and shape (not its config)."""
    return p.kernel, p.dtype, tuple(p.shape)


def prepared(points: Sequence[Point], seeds: Sequence[int], *,
             shared: bool = False) -> Iterator[tuple[Point, tuple, _Ahead]]:
    """(point, `prepare(point, seed)`, the next point's preparation) in order. The next point's
    inputs are made and put on the chip in a background thread while this point compiles and
    is checked; `run_point` waits for it before it times anything, so no host work or copy to
    the chip overlaps a timed call. One ahead: at most two points' inputs live at once.

    `shared` (a tuning sweep's candidates): points of one kind (`_kind`) take the first one's
    preparation, from its seed: their inputs are made and put on the chip once, and their checks
    meet the same host arrays, so a `point.reused` float64 reference is computed once. Every
    kind's preparation then lives until the sweep ends."""
    points = list(points)
    if not points:
        return
    seeds = list(seeds)
    made: dict[tuple, Any] = {}
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="chip-inputs") as pool:

        def submit(i: int):
            if not shared:
                return pool.submit(prepare, points[i], seeds[i])
            kind = _kind(points[i])
            if kind not in made:
                made[kind] = pool.submit(prepare, points[i], seeds[i])
            return made[kind]

        ahead = submit(0)
        for i, p in enumerate(points):
            ready = ahead.result()
            ahead = submit(i + 1) if i + 1 < len(points) else None
            yield p, ready, _Ahead(ahead)
            del ready
        made.clear()


def _checked(fn, args, check, host_inputs, host_s: dict[str, float]) -> tuple[dict[str, Any], Any]:
    """Compile one function of the point, run it once and check its result against float64."""
    compiled, compile_s, error = measure.compile_fn(fn, args)
    side: dict[str, Any] = {"compiles": error is None, "compile_s": round(compile_s, 3)}
    if error is not None:
        side["error"] = error
        return side, None
    try:
        out = jax.block_until_ready(compiled(*args))
        start = time.perf_counter()
        out = jax.device_get(out)
        got = time.perf_counter()
        side["error_vs_f64"] = float(check(host_inputs, out))
        host_s["get"] = round(host_s.get("get", 0.0) + got - start, 3)
        host_s["check"] = round(host_s.get("check", 0.0) + time.perf_counter() - got, 3)
    except Exception as e:  # a runtime failure is a verdict too
        side["run_error"] = measure.error_text(e)
        return side, None
    return side, compiled


def run_point(p: Point, *, seed: int, rounds: int, floor_s: float, peaks: dict | None,
              baselines: bool = True, ready: tuple | None = None, ahead: _Ahead | None = None) -> dict[str, Any]:
    """One point's row. `ready` is `prepare(p, seed)` when it was made ahead (its time then
    overlapped the previous point's and is not in `wall_s`); `ahead` is the next point's
    preparation, waited for before the timed calls. Every side is compiled and checked first,
    then timed."""
    start = time.perf_counter()
    host_inputs, args, host_s = ready if ready is not None else prepare(p, seed)
    host_s = dict(host_s)
    row: dict[str, Any] = {
        "id": p.id, "section": p.section, "kernel": p.kernel, "dtype": p.dtype, "shape": list(p.shape),
        "statics": {k: v for k, v in p.statics.items()}, "flops": p.flops, "bytes": p.bytes, "bound": p.bound,
    }
    if p.note:
        row["note"] = p.note
    fns = {"pallas": p.pallas, **(p.xla if baselines else {})}
    compiled = {}
    for name, fn in fns.items():
        row[name], compiled[name] = _checked(fn, args, p.check, host_inputs, host_s)
    prefetch = {name: measure.cross_program_prefetch(c) for name, c in compiled.items() if c is not None}
    for name, flag in prefetch.items():
        row[name]["cross_program_prefetch"] = flag
    if ahead is not None:
        ahead.wait()
    sets = measure.copies(args) if any(prefetch.values()) else None
    if sets is not None:
        row["rotated"] = len(sets)
    sides = {name: c for name, c in compiled.items() if c is not None}
    for name, t in measure.time_interleaved(sides, args, rounds=rounds, sets=sets).items():
        if isinstance(t, Exception):  # a runtime failure is a verdict too
            row[name]["run_error"] = measure.error_text(t)
            continue
        row[name]["time_s"] = t
        if getattr(t, "spread", None) is not None:  # the rounds' spread (measure.Seconds)
            row[name]["spread"] = round(t.spread, 4)
    if sets is not None:
        timed = {name: c for name, c in sides.items() if "time_s" in row[name]}
        for name, t in measure.time_interleaved(timed, args, rounds=rounds).items():
            if isinstance(t, Exception):
                row[name]["run_error"] = measure.error_text(t)
            else:
                row[name]["time_same_inputs_s"] = t
    del compiled, sides, sets
    _derive(row, floor_s, peaks)
    if row.get("dispatch_bound"):
        _time_in_program(row, fns, args, rounds)
        _derive(row, floor_s, peaks)
    row["wall_s"] = round(time.perf_counter() - start, 2)
    row["host_s"] = host_s
    del args
    return row


def _time_in_program(row: dict[str, Any], fns: dict, args: list, rounds: int) -> None:
    """Each side of a dispatch-bound point timed as `measure.IN_PROGRAM_CALLS` calls in one
    program: its own time per call, without the per-call dispatch (`measure.in_one_program`),
    the sides' rounds interleaved as their calls' are (a program's one dispatch is in its time)."""
    n = measure.IN_PROGRAM_CALLS
    looped = {}
    for name, fn in fns.items():
        if "time_s" not in row[name]:
            continue
        compiled, _, error = measure.compile_fn(measure.in_one_program(fn, n), args)
        if compiled is None:
            row[name]["in_program_error"] = error
            continue
        looped[name] = compiled
    # rounds of round_s: each call is n kernels already
    for name, t in measure.time_interleaved(looped, args, rounds=rounds, round_s=0.05).items():
        if isinstance(t, Exception):  # a runtime failure is a verdict too
            row[name]["in_program_error"] = measure.error_text(t)
        else:
            row[name]["time_in_program_s"] = t / n
    del looped
    row["in_program_calls"] = n


def _derive(row: dict[str, Any], floor_s: float, peaks: dict | None) -> None:
    """Share of peak, speed against each baseline, and the dispatch-bound flag: the kernel's
    time, or the time the point's work takes at the chip's peaks (its roofline time), under
    twice the dispatch floor. The floor is a one-output trivial function's; a call with more
    buffers costs more (rmsnorm's two outputs, kernel and XLA alike: the record's rows at few
    rows show it), so a point whose work is that small times the host either way."""
    t = row["pallas"].get("time_s")
    if t is None:
        return
    row["dispatch_bound"] = bool(t < 2 * floor_s)
    if peaks:
        row["roofline_s"] = max(row["flops"] / peaks["flops"], row["bytes"] / peaks["hbm_bytes"])
        row["dispatch_bound"] = bool(row["dispatch_bound"] or row["roofline_s"] < 2 * floor_s)
        if row["bound"] == "compute":
            row["tflops"] = row["flops"] / t / 1e12
            row["share_of_peak"] = row["flops"] / t / peaks["flops"]
        else:
            row["gbps"] = row["bytes"] / t / 1e9
            row["share_of_peak"] = row["bytes"] / t / peaks["hbm_bytes"]
    for name in ("xla", "jax_flash"):
        tb = row.get(name, {}).get("time_s")
        if tb:
            row[f"speed_vs_{name}"] = tb / t  # > 1: the kernel is faster
        ti, tbi = row["pallas"].get("time_in_program_s"), row.get(name, {}).get("time_in_program_s")
        if ti and tbi:
            row[f"speed_in_program_vs_{name}"] = tbi / ti


def run_points(points: list[Point], *, seed: int = 0, rounds: int = 5, peaks: dict | None, floor_s: float,
               log=print, deadline: float | None = None, baselines: bool = True,
               save=None) -> list[dict[str, Any]]:
    """Each point's row; `save(rows)` after each (a run cut short keeps what it measured)."""
    rows = []
    for i, (p, ready, ahead) in enumerate(prepared(points, [seed + i for i in range(len(points))])):
        if deadline is not None and time.monotonic() > deadline:
            log(f"  stopped at the time budget: {len(points) - i} points not run")
            break
        row = run_point(p, seed=seed + i, rounds=rounds, floor_s=floor_s, peaks=peaks, baselines=baselines,
                        ready=ready, ahead=ahead)
        rows.append(row)
        log(summary(row))
        if save is not None:
            save(rows)
    return rows


def summary(row: dict[str, Any]) -> str:
    pallas = row["pallas"]
    if not pallas["compiles"]:
        return f"  {row['id']:<60} FAILS: {pallas.get('error', '')[:120]}"
    if "run_error" in pallas:
        return f"  {row['id']:<60} RUN ERROR: {pallas['run_error'][:120]}"
    parts = [f"{pallas['time_s'] * 1e6:10.1f} us", f"err {pallas['error_vs_f64']:.1e}"]
    for name in ("xla", "jax_flash"):
        if name in row and "time_s" in row[name]:
            parts.append(f"{name} {row[name]['time_s'] * 1e6:.1f} us (x{row.get(f'speed_vs_{name}', 0):.2f})")
        elif name in row:
            parts.append(f"{name} FAILS")
    if "share_of_peak" in row:
        parts.append(f"{100 * row['share_of_peak']:.0f}% peak")
    if row.get("rotated"):
        parts.append(f"inputs cycled x{row['rotated']}")
    if row.get("dispatch_bound"):
        parts.append("dispatch-bound")
    return f"  {row['id']:<60} " + "  ".join(parts)


__all__ = ["prepare", "prepared", "run_point", "run_points", "summary"]
