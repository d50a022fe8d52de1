"""Run points on the attached chip and turn each into a row of the record."""

from __future__ import annotations

import time
from typing import Any

import jax
import numpy as np

from tpu_kernels.chip import measure
from tpu_kernels.chip.points import Point


def _to_device(inputs: tuple) -> list:
    return [jax.device_put(a) for a in inputs]


def _side(fn, args, check, host_inputs, *, rounds: int) -> dict[str, Any]:
    """Compile, run once and check, then time one function of the point."""
    compiled, compile_s, error = measure.compile_fn(fn, args)
    row: dict[str, Any] = {"compiles": error is None, "compile_s": round(compile_s, 3)}
    if error is not None:
        row["error"] = error
        return row
    try:
        out = jax.block_until_ready(compiled(*args))
        row["error_vs_f64"] = float(check(host_inputs, jax.device_get(out)))
        row["time_s"] = measure.timed(compiled, args, rounds=rounds)
    except Exception as e:  # a runtime failure is a verdict too
        row["compiles"] = True
        row["run_error"] = measure.error_text(e)
    return row


def run_point(p: Point, *, seed: int, rounds: int, floor_s: float, peaks: dict | None,
              baselines: bool = True) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    host_inputs = p.make(rng)
    args = _to_device(host_inputs)
    row: dict[str, Any] = {
        "id": p.id, "section": p.section, "kernel": p.kernel, "dtype": p.dtype, "shape": list(p.shape),
        "statics": {k: v for k, v in p.statics.items()}, "flops": p.flops, "bytes": p.bytes, "bound": p.bound,
    }
    if p.note:
        row["note"] = p.note
    row["pallas"] = _side(p.pallas, args, p.check, host_inputs, rounds=rounds)
    if baselines:
        for name, fn in p.xla.items():
            row[name] = _side(fn, args, p.check, host_inputs, rounds=rounds)
    _derive(row, floor_s, peaks)
    row["wall_s"] = round(time.perf_counter() - start, 2)
    del args
    return row


def _derive(row: dict[str, Any], floor_s: float, peaks: dict | None) -> None:
    """Share of peak, speed against each baseline, and the dispatch-bound flag."""
    t = row["pallas"].get("time_s")
    if t is None:
        return
    row["dispatch_bound"] = bool(t < 2 * floor_s)
    if peaks:
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


def run_points(points: list[Point], *, seed: int = 0, rounds: int = 5, peaks: dict | None, floor_s: float,
               log=print, deadline: float | None = None, baselines: bool = True,
               save=None) -> list[dict[str, Any]]:
    """Each point's row; `save(rows)` after each (a run cut short keeps what it measured)."""
    rows = []
    for i, p in enumerate(points):
        if deadline is not None and time.monotonic() > deadline:
            log(f"  stopped at the time budget: {len(points) - i} points not run")
            break
        row = run_point(p, seed=seed + i, rounds=rounds, floor_s=floor_s, peaks=peaks, baselines=baselines)
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
    if row.get("dispatch_bound"):
        parts.append("dispatch-bound")
    return f"  {row['id']:<60} " + "  ".join(parts)


__all__ = ["run_point", "run_points", "summary"]
