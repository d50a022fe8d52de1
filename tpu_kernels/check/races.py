"""Run an op under JAX's TPU-semantics interpreter with its race detector.

The interpreter simulates a TPU's memories, DMAs and semaphores. With two
cores (as on chips with two TensorCores per device), grid axes marked
"parallel" are split between them, so a kernel whose "parallel" axis really
carries a dependency (an accumulator, an output block revisited along it)
shows a race: two cores touching the same buffer with no ordering between them.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

import jax
from jax.experimental.pallas import tpu as pltpu

from tpu_kernels import _compat, dtypes, interpret
from tpu_kernels.check.examples import Call
from tpu_kernels.check.explain import RACE, Explanation, explain

if TYPE_CHECKING:
    from tpu_kernels.op import KernelOp

CORES = 2


def race_params() -> pltpu.InterpretParams:
    return pltpu.InterpretParams(detect_races=True, num_cores_or_threads=CORES)


_ACCESS = re.compile(r"(write|read) of \('(\w+)', (\d+)[^\]]*?\)\[(.*?)\] from \((\d+), (\d+)\)")


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


@contextlib.contextmanager
def _quiet_callbacks() -> Iterator[None]:
    """The interpreter raises from inside io_callbacks, and JAX logs each one with its full
    traceback before re-raising; the exception itself carries the report."""
    log = logging.getLogger(_compat.JAX_CALLBACK_LOGGER)
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        log.setLevel(level)


def run_with_race_detection(op: KernelOp, call: Call) -> Explanation | None:
    """Run one call of `op` (concrete JAX arrays) in the race-detecting interpreter.

    Returns None when it ran cleanly; a RACE explanation when the detector fired; the
    explained error when the op failed otherwise."""
    args, kwargs = call
    sig = op.signature
    values = sig.bind(args, kwargs)
    tensors = [v for p, v in zip(sig.params, values) if p.is_tensor]
    statics = {p.name: v for p, v in zip(sig.params, values) if not p.is_tensor}
    x64 = dtypes.needs_x64(tensors, statics)
    params = race_params()
    # The interpreter's state is process-global: one user of it at a time, the reset included.
    with interpret.exclusive(params):
        try:
            with jax.enable_x64(True) if x64 else contextlib.nullcontext(), _quiet_callbacks():
                fn = op.jax_function(interpret=params, **statics)
                jax.block_until_ready(fn(*tensors))
        except Exception as e:
            # After an exception the interpreter's shared state must be reset before it runs again.
            interpret.reset_tpu_interpreter()
            text = str(e)
            if "RACE DETECTED" in text:
                report = text[text.find("RACE DETECTED") :].split("\n\n")[0]
                raw = "\n".join(line for line in report.splitlines() if not line.strip().startswith("clock:"))
                return Explanation(RACE, explain_race(text), raw)
            return explain(e)
    return None
