"""Run an op under JAX's TPU-semantics interpreter with its race detector.

The interpreter simulates a TPU's memories, DMAs and semaphores. With two
cores (as on chips with two TensorCores per device), grid axes marked
"parallel" are split between them, so a kernel whose "parallel" axis really
carries a dependency through an output block revisited along it shows a race:
two cores touching the same buffer with no ordering between them. State carried
in scratch memory shows none (each core has its own scratch: the second core
starts from an unwritten buffer, a wrong result with no race), so the
dimension-semantics lint reads it from the kernel body (lowering_check/scratch.py).
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
from typing import TYPE_CHECKING

from jax.experimental.pallas import tpu as pltpu

from tpu_kernels.lowering_check.examples import Call
from tpu_kernels.lowering_check.explain import OUT_OF_BOUNDS, RACE, Explanation, explain
from tpu_kernels.verification import bounds

if TYPE_CHECKING:
    from tpu_kernels.op import KernelOp

CORES = 2


def race_params() -> pltpu.InterpretParams:
    return pltpu.InterpretParams(detect_races=True, num_cores_or_threads=CORES)


# "from (0, 1)" (JAX 0.12: the thread), "from 0, 1, ..." (JAX 0.10.2: device, core)
_ACCESS = re.compile(r"(write|read) of \('(\w+)', (\d+)[^\]]*?\)\[(.*?)\] from \(?(\d+), (\d+)")


def _slices(text: str) -> str:
    parts = re.findall(r"slice\((\w+), (\w+), \w+\)|(\d+)", text)
    return ", ".join(f"{a}:{b}" if a or b else c for a, b, c in parts)


def explain_race(text: str) -> str:
    """The interpreter's RACE DETECTED report in one line."""
    accesses = _ACCESS.findall(text[text.find("RACE DETECTED") :])[:2]
    if len(accesses) == 2:
        (k1, mem, buf, rng, _, c1), (k2, _, _, _, _, c2) = accesses
        what = f"a {k1} on core {c1} and a {k2} on core {c2} of {mem} buffer {buf} [{_slices(rng)}]"
    else:
        what = "two unordered accesses to one buffer"
    return (
        f"data race: {what}, with no ordering between them; a grid axis marked 'parallel' probably "
        "carries a dependency (an accumulator, or an output block revisited along it): mark it "
        "'arbitrary' in pltpu.CompilerParams(dimension_semantics=...)."
    )


def run_with_race_detection(op: KernelOp, call: Call) -> Explanation | None:
    """Run one call of `op` (concrete JAX arrays) in the race-detecting interpreter.

    Returns None when it ran cleanly; a RACE explanation when the detector fired; the
    explained error when the op failed otherwise (an out-of-bounds block in plain words)."""
    params = race_params()
    printed = io.StringIO()
    try:
        # JAX 0.12 raises the detector's report; JAX 0.10.2 prints it and runs on: read both
        with contextlib.redirect_stdout(printed):
            bounds.run_call(op, call, params)
    except Exception as e:
        text = str(e)
        if "RACE DETECTED" in text:
            return _race(text)
        found = bounds.explain_interpreter_error(text)
        if found is not None:
            return Explanation(OUT_OF_BOUNDS, found, bounds.interpreter_line(text))
        return explain(e)
    finally:
        sys.stdout.write(printed.getvalue())  # what the kernel printed still shows
    text = printed.getvalue()
    return _race(text) if "RACE DETECTED" in text else None


def _race(text: str) -> Explanation:
    report = text[text.find("RACE DETECTED") :].split("\n\n")[0]
    raw = "\n".join(line for line in report.splitlines() if not line.strip().startswith("clock:"))
    return Explanation(RACE, explain_race(text), raw)
