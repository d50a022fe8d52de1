"""How the chip runner measures one point: compile verdict, time, error against float64.

- Time: `n` calls issued back to back, one `block_until_ready` at the end, the minimum over
  `rounds` of the mean per call. Every jitted call costs a dispatch (on the v5e development
  machine, under gVisor, a large one: the record's `meta.dispatch_floor_s`), so a point whose
  time is within 2x of the measured dispatch floor (`dispatch_floor`) is marked dispatch-bound:
  its time says little about the kernel.
- Dispatch-bound points: a point whose call is mostly dispatch is timed a second way too, n
  calls inside one program (`in_one_program`), so its row also shows the kernel's own time per
  call (`time_in_program_s`) and the speeds from it. Each output buffer of a call adds host time
  on the v5e: a kernel returning two outputs (the flash-attention template's forward: out and
  lse) loses per call to one returning one, and not in one program
  (bench/reports/chip_v5e_rows_probe.json).
- Inputs on chip: where XLA compiled a cross-program prefetch into a function
  (`cross_program_prefetch`: an input copied into on-chip memory, which stays there for the next
  call of the same program with the same buffer), timing n calls with the very same inputs
  reads part of them from on-chip memory instead of HBM: XLA's dot at decode shapes then read
  its weight faster than the HBM peak, and far slower when the calls cycled through distinct
  weights (bench/reports/chip_v5e_matmul_probe.json). A model
  reads each layer's weights once per step, so such a point is timed cycling through `ROTATE`
  on-chip copies of its inputs (`copies`, `timed(..., sets=...)`), every side alike.
- Error: normwise, ||y - ref|| / ||ref|| over the checked elements, where ref is computed on
  the host in float64 (NumPy) from the very inputs sent to the chip. For a matmul the host
  checks a sample of rows (the float64 product of all of an 8192^3 is minutes of host time);
  the record says how many.
- Compile: `jax.jit(fn).lower(*args).compile()`; a failure is the verdict, with the
  compiler's message (its first line that names the error, and the start of the text).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

# TPU v5e peaks (per chip: one TensorCore): ../shared/FACTS.md "The TPU v5e development machine";
# Google's v5e page gives 197 TF/s bf16 and 819 GB/s HBM. float32 matmuls run on the bf16 MXU
# in passes (one at "default", six at "highest"), so their share is given of the bf16 peak.
PEAKS = {
    "TPU v5 lite": {"flops": 197e12, "hbm_bytes": 819e9},
    "TPU v5e": {"flops": 197e12, "hbm_bytes": 819e9},
}


def peaks(device_kind: str) -> dict[str, float] | None:
    return PEAKS.get(device_kind)


def compile_fn(fn: Callable, args: Sequence[Any]) -> tuple[Any, float, str | None]:
    """-> (compiled or None, seconds, error text or None)."""
    start = time.perf_counter()
    try:
        compiled = jax.jit(fn).lower(*args).compile()
    except Exception as e:  # the compiler's verdict: recorded, not raised
        return None, time.perf_counter() - start, error_text(e)
    return compiled, time.perf_counter() - start, None


def error_text(e: BaseException, limit: int = 600) -> str:
    text = f"{type(e).__name__}: {e}"
    for line in text.splitlines():
        if any(w in line for w in ("RESOURCE_EXHAUSTED", "Unsupported", "Mosaic", "Error", "error")):
            first = line.strip()
            break
    else:
        first = text.splitlines()[0] if text else type(e).__name__
    rest = text if first in text[:limit] else first + " | " + text
    return rest[:limit]


ROTATE = 4
"""How many on-chip copies of its inputs a point with a cross-program prefetch cycles through."""


def cross_program_prefetch(compiled: Any) -> bool:
    """Whether XLA compiled a cross-program prefetch into `compiled` (its module's text says
    `cross_program_prefetch`); False where the text cannot be had."""
    try:
        text = compiled.as_text()
    except Exception:  # some backends keep no text: nothing to see
        return False
    return "cross_program_prefetch" in (text or "")


_copy = jax.jit(lambda xs: [x.copy() for x in xs])


def copies(args: Sequence[Any], n: int = ROTATE) -> list[list[Any]]:
    """`args` and n - 1 copies of it on the chip: the same values in distinct buffers (a
    result checked against one set holds for all)."""
    sets = [list(args)] + [_copy(list(args)) for _ in range(n - 1)]
    return jax.block_until_ready(sets)


class Seconds(float):
    """A time per call (the least over rounds) with `spread`: (slowest round - fastest) /
    fastest, the run-to-run spread of the rounds it was the least of (None from one round)."""

    spread: float | None = None

    @classmethod
    def of(cls, rounds: Sequence[float]) -> Seconds:
        t = cls(min(rounds))
        t.spread = (max(rounds) - t) / t if len(rounds) > 1 and t > 0 else None
        return t


def time_calls(
    fn: Callable,
    args: Sequence[Any],
    *,
    n: int,
    rounds: int,
    budget_s: float = 5.0,
    sets: Sequence[Sequence[Any]] | None = None,
) -> Seconds:
    """Seconds per call: min over rounds of (n calls, one wait) / n, with the rounds' spread
    (`Seconds`). `fn` is compiled already. With `sets`, the calls cycle through those argument
    lists (n rounded up to a multiple of their number) instead of repeating `args`."""
    cycle, n = _warm(fn, args, n, sets)
    per_call: list[float] = []
    for _ in range(rounds):
        per_call.append(_round(fn, cycle, n))
        if sum(per_call) * n > budget_s:
            break
    return Seconds.of(per_call)


def _warm(fn: Callable, args: Sequence[Any], n: int, sets) -> tuple[list[list[Any]], int]:
    """The argument lists a round cycles through, and n rounded up to whole cycles, after one
    call on each list."""
    cycle = [list(args)] if sets is None else [list(s) for s in sets]
    out = None
    for s in cycle:
        out = fn(*s)
    jax.block_until_ready(out)
    return cycle, -(-n // len(cycle)) * len(cycle)


def _round(fn: Callable, cycle: list[list[Any]], n: int) -> float:
    """Seconds per call of one round: n calls through `cycle`, one wait."""
    start = time.perf_counter()
    out = None
    for i in range(n):
        out = fn(*cycle[i % len(cycle)])
    jax.block_until_ready(out)
    return (time.perf_counter() - start) / n


def calls_for(estimate_s: float, *, target_s: float = 0.25, lo: int = 3, hi: int = 200) -> int:
    """How many calls make a round of about `target_s`."""
    return int(min(hi, max(lo, target_s / max(estimate_s, 1e-6))))


def timed(
    compiled: Any, args: Sequence[Any], *, rounds: int = 5, sets: Sequence[Sequence[Any]] | None = None,
    round_s: float = 0.25,
) -> float:
    """Time a compiled function: one call sizes rounds of about `round_s`, then `time_calls`
    (cycling through `sets` where given)."""
    start = time.perf_counter()
    jax.block_until_ready(compiled(*args))
    first = time.perf_counter() - start
    return time_calls(compiled, args, n=calls_for(first, target_s=round_s), rounds=rounds, sets=sets)


def time_interleaved(
    compiled: dict[str, Callable], args: Sequence[Any], *, rounds: int = 5,
    sets: Sequence[Sequence[Any]] | None = None, round_s: float = 0.25, budget_s: float = 5.0,
) -> dict[str, Seconds | Exception]:
    """`timed` for each side of a comparison, their rounds interleaved: round r of every side
    runs before round r + 1 of any. The host's time per call moves in spells of a second or
    more (bench/reports/chip_v5e_rows_probe.json, the `small` section: the same call slower by
    most of a dispatch for a whole measurement at a time, kernel and XLA alike), so sides timed
    one after the other can land in different spells; interleaved, each side's fastest round
    comes from the same spells.
    A side whose call raises gets its exception in place of a time; the others go on."""
    out: dict[str, Seconds | Exception] = {}
    ready: dict[str, tuple[list[list[Any]], int]] = {}
    for name, fn in compiled.items():
        try:
            start = time.perf_counter()
            jax.block_until_ready(fn(*args))
            ready[name] = _warm(fn, args, calls_for(time.perf_counter() - start, target_s=round_s), sets)
        except Exception as e:  # a runtime failure is a verdict too
            out[name] = e
    per_call: dict[str, list[float]] = {name: [] for name in ready}
    for _ in range(rounds):
        for name, (cycle, n) in ready.items():
            if name in out or sum(per_call[name]) * n > budget_s:
                continue
            try:
                per_call[name].append(_round(compiled[name], cycle, n))
            except Exception as e:
                out[name] = e
    return {name: out.get(name) or Seconds.of(per_call[name]) for name in compiled}


IN_PROGRAM_CALLS = 32
"""How many calls `in_one_program` makes of a dispatch-bound point's function."""


def in_one_program(fn: Callable, n: int = IN_PROGRAM_CALLS) -> Callable:
    """`fn` called n times inside one program (a `fori_loop`), returning the last call's
    outputs: timed, it costs one dispatch for n calls, so a point whose single call is mostly
    the machine's dispatch (and its cost per output buffer) shows the kernel's own time
    per call. Each call's inputs pass an `optimization_barrier` together with its outputs, so
    XLA cannot hoist a call out of the loop as loop-invariant, nor drop one."""

    def looped(*args):
        zeros = jax.tree.map(lambda s: jax.numpy.zeros(s.shape, s.dtype), jax.eval_shape(fn, *args))

        def body(i, carry):
            xs, _ = carry
            return jax.lax.optimization_barrier((xs, fn(*xs)))

        return jax.lax.fori_loop(0, n, body, (tuple(args), zeros))[1]

    return looped


def dispatch_floor() -> float:
    """Seconds per call of a trivial jitted function: the machine's dispatch cost."""
    x = jax.device_put(np.ones((8, 128), np.float32))
    f = jax.jit(lambda a: a + 1).lower(x).compile()
    return time_calls(f, [x], n=200, rounds=5)


def normwise(y: Any, ref: np.ndarray) -> float:
    """||y - ref|| / ||ref|| in float64 (0 for an all-zero ref matched exactly)."""
    y = np.asarray(y, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    den = float(np.linalg.norm(ref))
    num = float(np.linalg.norm(y - ref))
    return num / den if den else num


__all__ = [
    "PEAKS",
    "ROTATE",
    "calls_for",
    "compile_fn",
    "copies",
    "cross_program_prefetch",
    "dispatch_floor",
    "error_text",
    "in_one_program",
    "normwise",
    "peaks",
    "time_calls",
    "time_interleaved",
    "timed",
]
