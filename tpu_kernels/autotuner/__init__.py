"""Autotuning: find each tunable op's best config per chip, dtypes and shape bucket, ahead of time.

    result = tpu_kernels.autotune(model_step, x)   # runs model_step(x) once, tunes what it calls
    print(result.report())                          # every candidate, measured or predicted
    # saved into each op's table; later calls (this process or another) use the tuned configs

This package is the layer above the core that *finds* configs; the core (`tpu_kernels.tunables`)
declares tunables, keeps the tables and looks configs up at call time. docs/autotuning.md has
the whole story: declaring, tuning, committing, deploying, and what is measured vs predicted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import torch

from tpu_kernels import tunables, wiring
from tpu_kernels.autotuner import delegate
from tpu_kernels.autotuner.capture import Call, capture
from tpu_kernels.autotuner.point import (
    TUNING,
    CpuCheck,
    Outcome,
    Timer,
    check_borrowed,
    measure_call,
    predict_call,
)
from tpu_kernels.autotuner.result import TuningResult
from tpu_kernels.bench import timing
from tpu_kernels.bench.device import Device
from tpu_kernels.bench.device import resolve as resolve_device
from tpu_kernels.tunables import lookup


class Progress:
    """What a tuning run reports while it works: `start(units)` (one unit per op call and chip,
    plus one per Tokamax or Helion batch), `step(text)` for what it is doing, `advance(text)`
    when a unit is done, `stop()`. The default says nothing; `tpu-kernels tune` draws a bar."""

    def start(self, total: int) -> None: ...

    def step(self, text: str) -> None: ...

    def advance(self, text: str) -> None: ...

    def stop(self) -> None: ...


class Lines(Progress):
    """Each step and finished unit as a line through `say` (e.g. print)."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say

    def step(self, text: str) -> None:
        self.say(text)

    def advance(self, text: str) -> None:
        self.say(f"done: {text}")


def _chips_for(call: Call, chips: Iterable[str] | None) -> tuple[str | None, list[str]]:
    """(the chip to measure on, or None; the TPU chips to predict for)."""
    here = tunables.chip_of(call.device)
    if chips is None:
        return here, []
    chips = list(dict.fromkeys(chips))
    measure = here if here in chips else None
    predict = [c for c in chips if c != here]
    for c in predict:
        if c == "cpu" or c.startswith("cuda"):
            raise ValueError(
                f"autotune: chip {c!r} is not attached here ({here!r}): only TPU chips can be predicted."
            )
    return measure, predict


def tune_calls(
    calls: Sequence[Call],
    *,
    chips: Iterable[str] | None = None,
    settings: timing.Settings = TUNING,
    timer: Timer | None = None,
    progress: Progress | Callable[[str], None] | None = None,
    tokamax: bool = True,
    helion: bool = True,
    workers: int | None = None,
) -> TuningResult:
    """Tune captured calls (see `autotune`)."""
    result = TuningResult()
    bar = progress if isinstance(progress, Progress) else Lines(progress) if progress else Progress()
    devices: dict[str, Device] = {}
    tunable = [c for c in calls if c.kind == "tunable"]
    toka = [c for c in calls if c.kind == "tokamax"] if tokamax else []
    hel = [c for c in calls if c.kind == "helion"] if helion else []
    plan = [(call, _chips_for(call, chips)) for call in tunable]
    bar.start(sum((m is not None) + len(p) for _, (m, p) in plan) + bool(toka) + bool(hel))
    try:
        for call, (measure, predict) in plan:
            result._ops[call.op.name] = call.op
            measured = None  # this call on the attached chip: its wrong configs are no prediction's choice
            checked = CpuCheck()  # else the CPU interpreter's verdicts, shared by the chips predicted
            if measure is not None:
                kind = call.device.type
                device = devices.get(kind) or devices.setdefault(kind, resolve_device(kind))
                where = f"{call.op.name} on {measure}"
                bar.step(f"{where}: {len(call.op.tunables.configs)} candidates")
                result.outcomes.append(
                    measure_call(
                        call.op,
                        call.args,
                        call.kwargs,
                        device,
                        settings=settings,
                        timer=timer,
                        on_step=lambda what, w=where: bar.step(f"{w}: {what}"),
                        workers=workers,
                    )
                )
                bar.advance(where)
                measured = result.outcomes[-1]
            for chip in predict:
                bar.step(f"{call.op.name}: predicting for {chip}")
                result.outcomes.append(
                    predict_call(call.op, call.args, call.kwargs, chip, measured, checked, workers)
                )
                bar.advance(f"{call.op.name} for {chip} (predicted)")
        if toka:
            bar.step(f"tokamax: {len(toka)} call(s) to Tokamax's autotuner")
            result.tokamax = delegate.tune_tokamax(toka)
            bar.advance("tokamax")
        if hel:
            bar.step(f"helion: {len(hel)} call(s) to Helion's autotuner")
            result.helion = delegate.tune_helion(hel)
            bar.advance("helion")
    finally:
        bar.stop()
    if not calls:
        result.notes.append("the function called no tunable op (tune=, Tokamax or Helion)")
    return result


def autotune(
    fn: Callable,
    *inputs: Any,
    chips: Iterable[str] | None = None,
    save: bool = True,
    directory: str | Path | None = None,
    settings: timing.Settings = TUNING,
    timer: Timer | None = None,
    progress: Progress | Callable[[str], None] | None = None,
    tokamax: bool = True,
    helion: bool = True,
    workers: int | None = None,
    **kwargs: Any,
) -> TuningResult:
    """Run `fn(*inputs, **kwargs)` once and tune every tunable op it calls.

    Each op declared with `tune=` is tuned at each (shape bucket, dtypes) it was called with:
    on the chip attached, its candidates are checked against the op's reference and timed by
    the benchmark harness (`settings`); for each TPU chip in `chips` that is not attached
    ("v5e", "v6e", "7x", ...), they are pruned by the TPU check and ranked by a cost model,
    marked predicted. `chips` defaults to the attached chip only. Tokamax ops go to Tokamax's
    autotuner (`tokamax=`), Helion kernels to Helion's (`helion=`).

    With `save` (the default) the entries are merged into each op's table file (`directory`,
    else `$TPU_KERNELS_TUNING_DIR`, else beside the kernel's module) and this process uses them
    at once. The returned `TuningResult` has the report, the JSON and `with result:`.
    `timer`: how candidates are timed (default: `bench.timing.measure`); a test's stand-in.
    `workers`: the threads that compile a call's candidates ahead of checking and timing them
    one at a time (default `$TPU_KERNELS_TUNE_WORKERS`, else 1: one at a time).
    """
    calls = capture(fn, *inputs, **kwargs)
    result = tune_calls(
        calls,
        chips=chips,
        settings=settings,
        timer=timer,
        progress=progress,
        tokamax=tokamax,
        helion=helion,
        workers=workers,
    )
    if save:
        result.save(directory)
    return result


def tune_op(
    op: Any, *args: Any, chips: Iterable[str] | None = None, save: bool = True, **kwargs: Any
) -> TuningResult:
    """Tune one op at one call: `tune_op(softmax, x)` is `autotune(lambda: softmax(x))`."""
    return autotune(lambda: op(*args, **kwargs), chips=chips, save=save)


def _online(op: Any, args: tuple, kwargs: dict) -> bool:
    """TPU_KERNELS_AUTOTUNE=1: tune one call on the attached chip now, save and use the result."""
    call = Call(op, args, kwargs, "tunable")
    with torch.no_grad():
        result = tune_calls([call], settings=timing.quick(TUNING))
    if not result.entries():
        return False
    result.save()
    return True


wiring.install("online_tuner", _online)
wiring.install("borrow_check", check_borrowed)

__all__ = ["Lines", "Outcome", "Progress", "TuningResult", "autotune", "capture", "tune_calls", "tune_op"]
