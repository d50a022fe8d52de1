"""Device time from a jax.profiler trace.

On a TPU, wall-clock time of a small kernel is dominated by dispatch; the
profiler's device planes (`/device:TPU:N`) record how long the device itself was
busy. `device_seconds_per_call` traces one batch of calls and sums the events of
the device planes' "XLA Modules" lines (one event per executed program).

Unverified on a TPU here (no TPU on the development machine): on the CPU there
are no device planes and the function returns None; the parsing itself is tested
on the CPU's host plane (`busy_seconds`).
"""

from __future__ import annotations

import glob
import tempfile
from collections.abc import Callable, Sequence

import jax

from tpu_kernels.bench.device import Device
from tpu_kernels.bench.timing import time_calls

DEVICE_PLANE = "/device:"
MODULE_LINE = "XLA Modules"


def busy_seconds(profile: jax.profiler.ProfileData, plane_prefix: str, line_name: str) -> float | None:
    """Total duration of the events on `line_name` lines of planes whose name starts with `plane_prefix`."""
    total_ns, found = 0.0, False
    for plane in profile.planes:
        if not plane.name.startswith(plane_prefix):
            continue
        for line in plane.lines:
            if line.name != line_name:
                continue
            for event in line.events:
                total_ns += event.duration_ns
                found = True
    return total_ns / 1e9 if found else None


def trace(fn: Callable[[], object]) -> jax.profiler.ProfileData:
    with tempfile.TemporaryDirectory() as d:
        with jax.profiler.trace(d):
            fn()
        files = glob.glob(f"{d}/**/*.xplane.pb", recursive=True)
        return jax.profiler.ProfileData.from_file(files[0])


def device_seconds_per_call(
    device: Device, fn: Callable, arg_sets: Sequence[tuple], calls: int
) -> float | None:
    profile = trace(lambda: time_calls(device, fn, arg_sets, calls))
    busy = busy_seconds(profile, DEVICE_PLANE, MODULE_LINE)
    return None if busy is None else busy / calls
