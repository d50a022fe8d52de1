"""Tuning one call of one op: its candidate configs checked, measured and ranked.

For the chip attached (the call's device):
1. every candidate is traced at the call's shapes and matmul precision (the op's `eval_shape`,
   as the tuned lookup validates a config): a config the kernel refuses there is *refused* and
   never runs;
2. on a TPU, the TPU check lowers each remaining candidate for that chip; a problem (VMEM,
   tiling, coverage) *prunes* it before anything runs;
3. each remaining candidate runs once and is judged against the op's float64 reference by the
   benchmark's correctness criterion (`bench.correctness`, with the declared default's result
   as the yardstick a candidate may be a few times less accurate than): a wrong result (or an
   exception) excludes it, and the report says so. The allowance assumes the benchmark's
   reduction length (`correctness.reduction_length`: the reference's `reduces=`, else the
   largest input dimension). An op without a reference is compared with its default config
   run in float64 (or, failing that, in its own dtypes);
4. the survivors are timed by the benchmark harness (warm-up, interleaved rounds, rotating input
   copies, medians with spread: `bench.timing.measure`), and `select.choose` picks;
5. the contenders are timed again until two passes agree (`_settle`), or the report says the
   choice did not settle.
A run where no candidate survives gives a "failed" entry, which lookups refuse to run.

Before step 3 the candidates' kernels are built (traced, lowered, compiled) ahead, in a thread
pool of `build_workers()` threads (`workers=`, `$TPU_KERNELS_TUNE_WORKERS`; 1: one at a time
inside each first call, as before); what that gains depends on whether XLA compiles in
parallel on the machine (docs/autotuning.md measures it). Their first calls, the checks and the timing then run one at a time, after every build: a timing
never overlaps a compile or another timing. A build that fails is not kept (the kernel cache
keeps no failed entry), so the candidate's first call fails the same way and says so.

For each TPU chip that is not attached, `predict.py` prunes and ranks instead: the entry is
marked predicted. Its candidates' results are still checked: by the measured run's verdicts
when the call was measured too, else in the CPU interpreter (`interpret.py`).
"""

from __future__ import annotations

import contextvars
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from tpu_kernels import tunables
from tpu_kernels.autotuner import predict as predictor
from tpu_kernels.autotuner.capture import call_metadata, copy_value
from tpu_kernels.autotuner.select import Choice, choose, choose_predicted
from tpu_kernels.bench import correctness, timing
from tpu_kernels.bench.device import Device, last_level_cache_bytes
from tpu_kernels.bench.stats import Summary
from tpu_kernels.runtime import prebuild
from tpu_kernels.runtime import precision as matmul_precision
from tpu_kernels.tunables.lookup import toolkit_version
from tpu_kernels.verification import checked_mode

# bench.timing.measure's signature: (device, {name: (fn, arg_sets)}, settings) -> {name: Timing}
Timer = Callable[[Device, dict, timing.Settings], dict]

STABILITY_PASSES = 2
"""Extra timing passes a measured choice may take to settle (`_settle`): on an idle machine
the first confirms it; the report says when the last two passes still disagree."""

TUNING = timing.Settings(rounds=7, min_sample_s=0.01, warmup_s=1.0)
"""The harness settings a tuning run times candidates with by default: fewer rounds than a
benchmark (a tuning run times many candidates), the same method."""


WORKERS_ENV = "TPU_KERNELS_TUNE_WORKERS"
"""How many threads build a call's candidates ahead (`build_workers`); 1 builds none ahead."""


def build_workers(n_candidates: int, workers: int | None = None) -> int:
    """The threads that build `n_candidates` candidates: `workers`, else `$TPU_KERNELS_TUNE_WORKERS`,
    else 1 (XLA's CPU compiles did not overlap on the 2-core machine measured: docs/autotuning.md);
    never more than the candidates."""
    if workers is None:
        value = os.environ.get(WORKERS_ENV, "").strip()
        if value:
            try:
                workers = int(value)
            except ValueError:
                raise ValueError(
                    f"{WORKERS_ENV}={value!r}: expected a whole number of threads, 1 or more"
                ) from None
            where = f"{WORKERS_ENV}={value!r}"
        else:
            workers = 1
            where = ""
    else:
        where = f"workers={workers!r}"
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(
            f"{where}: the tuner's build workers must be a whole number, 1 or more (1: one at a time)"
        )
    return max(1, min(workers, n_candidates))


@dataclass
class Candidate:
    """One config at one call: what became of it, and the evidence."""

    config: tuple
    status: str = "pending"  # refused, pruned, failed, wrong, measured, predicted, chosen
    reason: str = ""
    timing: Summary | None = None
    prediction: predictor.Prediction | None = None
    error_ratio: float | None = None  # the correctness check's error / allowed (> 1 is wrong)
    reduction: int | None = None  # the reduction length the check's allowance assumed
    first_call_s: float | None = None  # its first call: tracing, compiling and one run (and sync)
    build_s: float | None = None  # its build ahead, in a worker (wall time): part of first_call_s

    def to_json(self, names: Sequence[str]) -> dict[str, Any]:
        out: dict[str, Any] = {"config": dict(zip(names, self.config)), "status": self.status}
        if self.reason:
            out["reason"] = self.reason
        if self.timing is not None:
            out.update(
                median_s=_sig(self.timing.median), p10_s=_sig(self.timing.p10), p90_s=_sig(self.timing.p90)
            )
        if self.prediction is not None:
            out.update({k: _sig(v) for k, v in self.prediction.to_dict().items()})
        if self.first_call_s is not None:
            out["first_call_s"] = _sig(self.first_call_s)
        if self.build_s is not None:
            out["build_s"] = _sig(self.build_s)
        if self.error_ratio is not None:
            out["error_ratio"] = round(self.error_ratio, 4)
            out["reduction"] = self.reduction
        return out


@dataclass
class Outcome:
    """The tuning of one op at one call for one chip."""

    op: str
    chip: str
    source: str  # "measured" or "predicted"
    shapes: list
    dtypes: tuple
    bucket: tuple
    names: tuple[str, ...]
    candidates: list[Candidate]
    choice: Choice | None
    method: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    program: str | None = None  # the digest of the entry config's traced program (provenance.py)

    @property
    def chosen(self) -> dict[str, Any] | None:
        return None if self.choice is None else dict(zip(self.names, self.choice.config))

    def entry(self) -> tunables.Entry | None:
        """The table entry this tuning gives: the chosen config; when a measured run found no
        candidate right, a "failed" entry (no config) that lookups refuse to run; else None."""
        evidence: dict[str, Any] = {"shape": self.shapes}
        if self.program is not None:
            evidence["program"] = self.program
        if self.choice is None:
            if self.source != "measured":
                return None
            evidence["why"] = self.failure()
        else:
            evidence["decisive"] = self.choice.decisive
            evidence["tied"] = [dict(zip(self.names, c)) for c in self.choice.tied]
        evidence.update(
            method=self.method,
            candidates=[c.to_json(self.names) for c in self.candidates],
            tuned_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        )
        return tunables.Entry(
            chip=self.chip,
            dtypes=self.dtypes,
            bucket=self.bucket,
            toolkit=toolkit_version(),
            config=self.chosen or {},
            source=self.source if self.choice is not None else "failed",
            evidence=evidence,
        )

    def failure(self) -> str:
        """Why no candidate survived, a clause per candidate."""
        parts = [
            f"{', '.join(f'{n}={v!r}' for n, v in zip(self.names, c.config))}: {c.status}"
            + (f" ({c.reason})" if c.reason else "")
            for c in self.candidates
        ]
        return "; ".join(parts) or "no candidate"


_JUDGED = ("measured", "chosen", "wrong", "failed")  # a measured candidate's statuses once judged


@dataclass
class CpuCheck:
    """The CPU interpreter's verdicts on one call's candidates (config -> the candidate as
    judged) and the shapes they were judged at: shared by the chips the call is predicted for."""

    shapes: list | None = None
    verdicts: dict[tuple, Candidate] = field(default_factory=dict)


def _sig(v: Any) -> Any:
    """A measured or predicted figure to 4 significant digits (the table is for people)."""
    return float(f"{v:.4g}") if isinstance(v, float) else v


def candidates_for(op: Any, kwargs: dict) -> list[tuple]:
    """The op's candidate configs, restricted to the tunables the call fixes itself."""
    t = op.tunables
    fixed = {n: kwargs[n] for n in t.names if n in kwargs}
    if not fixed:
        return list(t.configs)
    keep = [c for c in t.configs if all(c[t.names.index(n)] == v for n, v in fixed.items())]
    return keep or [t.config_of(fixed)]


def measure_call(
    op: Any,
    args: tuple,
    kwargs: dict,
    device: Device,
    *,
    settings: timing.Settings = TUNING,
    timer: Timer | None = None,
    on_step: Callable[[str], None] | None = None,
    workers: int | None = None,
) -> Outcome:
    """Tune `op` at this call on the attached `device` (steps 1-4 of the module docstring);
    `workers`: the threads that build the candidates ahead (`build_workers`)."""
    started = time.perf_counter()
    t = op.tunables
    shapes, dtypes, bucket = call_metadata(op, args, kwargs)
    chip = tunables.chip_of(device.torch_device)
    cands = [Candidate(c) for c in candidates_for(op, kwargs)]
    step = on_step or (lambda what: None)
    base_kwargs = {k: v for k, v in kwargs.items() if k not in t.names}

    def config_kwargs(c: Candidate) -> dict:
        return {**base_kwargs, **dict(zip(t.names, c.config))}

    for c in cands:
        _refuse_if_invalid(op, args, config_kwargs(c), c)
    if device.type == "tpu":
        from tpu_kernels.lowering.target import chip as tpu_chip

        target = tpu_chip(chip) if chip != "tpu" else None
        for c in cands:
            if c.status == "pending":
                _prune_for(op, args, config_kwargs(c), target, c)
    notes: list[str] = []
    live = [c for c in cands if c.status == "pending"]
    # On a TPU torch_tpu compiles a kernel at its first call, outside tpu_kernels' executor:
    # nothing to build ahead there.
    n_workers = build_workers(len(live), workers) if device.type != "tpu" else 1
    built_s = _run_and_judge(op, args, kwargs, live, notes, step, device.synchronize, n_workers)
    runnable = [c for c in cands if c.status == "pending"]
    timings: dict[tuple, Summary] = {}
    choice, passes = None, []
    timing_started = time.perf_counter()
    if runnable:
        sets = _input_sets(args, kwargs, settings, device)
        fns = {
            t.describe(c.config): (_call(op, c.config, t.names), [(a, {**k, **base_kwargs}) for a, k in sets])
            for c in runnable
        }
        label = {t.describe(c.config): c for c in runnable}
        samples: dict[str, list[float]] = {}

        def time_pass(names: list[str]) -> Choice:
            measured = (timer or _harness)(device, {n: fns[n] for n in names}, settings)
            for name, tm in measured.items():
                samples.setdefault(name, []).extend(tm.samples)
                label[name].timing = Summary.of(samples[name])
                label[name].status = "measured"
                timings[label[name].config] = label[name].timing
            return choose([c.config for c in cands], timings)

        step(f"time {len(runnable)} candidates")
        choice = time_pass(list(fns))
        passes.append(choice.config)
        choice = _settle(choice, passes, timings, label, time_pass, step)
        if len(passes) > 1 and passes[-1] != passes[-2]:
            notes.append(
                f"the choice did not settle in {len(passes)} timing passes ("
                + " -> ".join(t.describe(c) for c in passes)
                + "): the machine is probably loaded; tune again on an idle one"
            )
    if choice is not None:
        for c in cands:
            if c.config == choice.config:
                c.status = "chosen"
    method = {
        "kind": "measured",
        "device": device.name,
        "build_workers": n_workers,
        "timer": "bench.timing.measure",
        "rounds": settings.rounds,
        "min_sample_s": settings.min_sample_s,
        "passes": [dict(zip(t.names, c)) for c in passes],
        "stable": len(passes) < 2 or passes[-1] == passes[-2],
        "timing_s": _sig(time.perf_counter() - timing_started),
        "total_s": _sig(time.perf_counter() - started),
    }
    if built_s is not None:
        method["build_s"] = _sig(built_s)
    return _with_program(
        op, args, kwargs, Outcome(op.name, chip, "measured", shapes, dtypes, bucket, t.names, cands, choice, method, notes)
    )


def _settle(
    choice: Choice,
    passes: list,
    timings: dict[tuple, Summary],
    label: dict[str, Candidate],
    time_pass: Callable[[list[str]], Choice],
    step: Callable[[str], None],
) -> Choice:
    """Time the contenders again (the tied and the two fastest medians), their samples pooled
    with the earlier ones, until two passes in a row choose alike or `STABILITY_PASSES` extra
    passes are spent: a choice that one burst of load made is not kept. `passes` gets each
    pass's choice."""
    names = {c.config: n for n, c in label.items()}
    for _ in range(STABILITY_PASSES):
        fastest = sorted(timings, key=lambda c: timings[c].median)[:2]
        contenders = list(dict.fromkeys([*choice.tied, *fastest]))
        if len(contenders) < 2:
            break
        step(f"time {len(contenders)} contenders again")
        choice = time_pass([names[c] for c in contenders])
        passes.append(choice.config)
        if passes[-1] == passes[-2]:
            break
    return choice


def predict_call(
    op: Any,
    args: tuple,
    kwargs: dict,
    chip: str,
    measured: Outcome | None = None,
    checked: CpuCheck | None = None,
    workers: int | None = None,
) -> Outcome:
    """Rank `op`'s candidates at this call for the TPU `chip` by the cost model (predict.py),
    among those whose results are right: `measured` (this call tuned on the attached chip)
    excludes the configs found wrong or failing there; without it, each candidate runs in
    the CPU interpreter (`interpret.check_inputs`: at a smaller shape when the call's is too big)
    and is judged as a measured one is. `checked` keeps those verdicts across the chips one call
    is predicted for, so each config runs once. `workers`: the threads that build those ahead."""
    from tpu_kernels.lowering.target import chip as tpu_chip

    started = time.perf_counter()
    t = op.tunables
    shapes, dtypes, bucket = call_metadata(op, args, kwargs)
    target = tpu_chip(chip)
    figures = predictor.ChipFigures.of(chip)
    cands = [Candidate(c) for c in candidates_for(op, kwargs)]
    base_kwargs = {k: v for k, v in kwargs.items() if k not in t.names}
    predicted: dict[tuple, float] = {}
    for c in cands:
        kw = {**base_kwargs, **dict(zip(t.names, c.config))}
        _refuse_if_invalid(op, args, kw, c)
        if c.status != "pending":
            continue
        _prune_for(op, args, kw, target, c)
    notes: list[str] = []
    method: dict[str, Any] = {"kind": "predicted", "model": predictor.MODEL}
    pending = [c for c in cands if c.status == "pending"]
    unjudged = pending
    if measured is not None:  # its verdicts first: wrong or failing configs are out
        verdicts = {m.config: m for m in measured.candidates if m.status in _JUDGED}
        for c in pending:
            seen = verdicts.get(c.config)
            if seen is not None and seen.status in ("wrong", "failed"):
                c.status, c.reason = seen.status, f"{seen.status} when measured on {measured.chip}: {seen.reason}"
            if seen is not None:
                c.error_ratio, c.reduction = seen.error_ratio, seen.reduction
        method["checked_by"] = f"this call measured on {measured.chip}"
        unjudged = [c for c in pending if c.config not in verdicts]  # e.g. pruned on the chip measured
    if unjudged:  # the CPU interpreter judges the rest
        checked = CpuCheck() if checked is None else checked
        fresh = [c for c in unjudged if c.config not in checked.verdicts]
        if fresh:
            checked.shapes = _check_in_interpreter(op, args, kwargs, fresh, notes, workers)
            checked.verdicts.update({c.config: replace(c) for c in fresh})
        for c in unjudged:
            seen = checked.verdicts[c.config]
            c.status, c.reason, c.error_ratio, c.reduction = seen.status, seen.reason, seen.error_ratio, seen.reduction
        method["checked_at"] = checked.shapes
    for c in cands:
        if c.status != "pending":
            continue
        _model(op, args, {**base_kwargs, **dict(zip(t.names, c.config))}, target, figures, c)
        if c.prediction is not None:
            predicted[c.config] = c.prediction.seconds
    prefer = cost_prefer(op)
    keys = ({config: prefer(*args, **{**base_kwargs, **dict(zip(t.names, config))}) for config in predicted}
            if prefer is not None else None)
    choice = choose_predicted([c.config for c in cands], predicted, cost_tie(op), keys) if predicted else None
    if choice is not None:
        for c in cands:
            if c.config == choice.config:
                c.status = "chosen"
    method["total_s"] = _sig(time.perf_counter() - started)
    return _with_program(
        op, args, kwargs, Outcome(op.name, chip, "predicted", shapes, dtypes, bucket, t.names, cands, choice, method, notes)
    )


def _cost(op: Any) -> Any:
    """`op`'s own cost model (`cost=`), or None."""
    return op.spec.options.cost if hasattr(op, "spec") else None


def cost_tie(op: Any) -> float:
    """The relative difference below which `op`'s own cost model (`cost=`) cannot tell two
    configs apart (its `tie` attribute; 0 without one, or without a cost model)."""
    return float(getattr(_cost(op), "tie", 0.0))


def cost_prefer(op: Any) -> Callable[..., tuple] | None:
    """How `op`'s own cost model breaks a tie (its `prefer` attribute: the call's arguments and
    a config's statics -> a key, least first), or None."""
    return getattr(_cost(op), "prefer", None)


def predict_config(op: Any, args: tuple, kwargs: dict, chip: str) -> Candidate:
    """One config of `op` (its tunables in `kwargs`) at one call for the TPU `chip`, as
    `predict_call` ranks it, results unchecked: refused, pruned by the lowering check, or
    predicted (`.prediction`). `args` may be `jax.ShapeDtypeStruct`s: nothing runs."""
    from tpu_kernels.lowering.target import chip as tpu_chip

    t = op.tunables
    c = Candidate(t.config_of({n: kwargs[n] for n in t.names if n in kwargs}))
    target = tpu_chip(chip)
    _refuse_if_invalid(op, args, kwargs, c)
    if c.status == "pending":
        _prune_for(op, args, kwargs, target, c)
    if c.status == "pending":
        _model(op, args, kwargs, target, predictor.ChipFigures.of(chip), c)
    return c


def _model(op: Any, args: tuple, kwargs: dict, target: Any, figures: predictor.ChipFigures, c: Candidate) -> None:
    """Trace `c`'s kernel for the TPU `target` and set its prediction (status "predicted"), or
    say why the cost model cannot rank it ("failed", "unmodelled")."""
    from tpu_kernels.lowering.export import flat_kernel, lowering_for_tpu, x64_scope
    from tpu_kernels.lowering_check import vmem

    try:
        flat, specs, x64 = flat_kernel(op, args, kwargs)
        # at the matmul precision the op's calls run at now (its float32 dots' passes are priced)
        with x64_scope(x64), lowering_for_tpu(target), matmul_precision.traced(matmul_precision.current(), "tpu"):
            kernels = vmem.traced_kernels(flat, *specs)
    except Exception as e:
        c.status, c.reason = "failed", _one_line(e)
        return
    eqns = [eqn for eqn, _ in kernels]
    if not eqns:
        c.status, c.reason = "unmodelled", "no pallas_call in the traced kernel: the cost model has nothing to rank"
        return
    c.prediction = predictor.predict(eqns, figures, [operands for _, operands in kernels])
    cost = _cost(op)
    if cost is not None:  # the op's own model prices the call; the roofline's parts stay beside
        try:
            with matmul_precision.traced(matmul_precision.current(), "tpu"):
                s = float(cost(figures, *args, **kwargs))
        except Exception as e:
            c.status, c.reason = "failed", f"its cost= raised: {_one_line(e)}"
            return
        c.prediction = replace(c.prediction, seconds=max(predictor.DISPATCH_FLOOR_S, s), kernel_s=s, model="cost=")
    c.status = "predicted"


def _with_program(op: Any, args: tuple, kwargs: dict, o: Outcome) -> Outcome:
    """`o` with the digest of the program its entry's config traces to (the default's for a
    failed entry), which a lookup compares with the kernel's then."""
    config = o.chosen or dict(zip(o.names, op.tunables.default))
    o.program = op.tuned.digest_of(o.shapes, o.dtypes, op.signature.bind(args, kwargs), config)
    return o


def check_borrowed(op: Any, args: tuple, kwargs: dict) -> str:
    """Run a call whose tunables (in `kwargs`) were borrowed from the nearest bucket's entry
    and judge its result as a tuning run would; -> why it is not right, "" when it is."""
    t = op.tunables
    c = Candidate(t.config_of({n: kwargs[n] for n in t.names if n in kwargs}))
    base = {k: v for k, v in kwargs.items() if k not in t.names}  # judged beside the declared default
    with torch.no_grad():
        _run_and_judge(op, args, base, [c], [])
    return "" if c.status == "pending" else f"{c.status}: {c.reason}"


def _check_in_interpreter(
    op: Any, args: tuple, kwargs: dict, cands: list[Candidate], notes: list[str], workers: int | None = None
) -> list:
    """Run and judge `cands` on the CPU (interpret.py); -> the shapes they were checked at."""
    from tpu_kernels.autotuner.interpret import check_inputs

    small_args, small_kwargs, shapes = check_inputs(args, kwargs)
    where = f"in the CPU interpreter at shapes {shapes}"
    t = op.tunables
    base_kwargs = {k: v for k, v in small_kwargs.items() if k not in t.names}
    for c in cands:
        _refuse_if_invalid(op, small_args, {**base_kwargs, **dict(zip(t.names, c.config))}, c)
        if c.status == "refused":  # valid at the call's shapes, not at the smaller ones
            c.status, c.reason = "unchecked", f"could not be checked {where}: {c.reason}"
    live = [c for c in cands if c.status == "pending"]
    with torch.no_grad():
        _run_and_judge(op, small_args, small_kwargs, live, notes, workers=build_workers(len(live), workers))
    for c in cands:
        if c.status in ("wrong", "failed"):
            c.reason = f"{c.reason} ({where})"
    return shapes


# ---- the steps ----------------------------------------------------------------------------------


def _refuse_if_invalid(op: Any, args: tuple, kwargs: dict, c: Candidate) -> None:
    try:  # as the tuned lookup validates a config: a trace at the call's matmul precision
        op.tuned.validate(args, kwargs)
    except Exception as e:
        c.status, c.reason = "refused", _one_line(e)


def _prune_for(op: Any, args: tuple, kwargs: dict, target: Any, c: Candidate) -> None:
    from tpu_kernels.lowering.target import chip as tpu_chip
    from tpu_kernels.lowering_check.lowering import check_call

    result = check_call(op, args, kwargs, target or tpu_chip())
    if not result.ok:
        c.status = "pruned"
        c.reason = "; ".join(p.message for p in result.problems) or "the TPU lowering failed"


def _run_and_judge(
    op: Any,
    args: tuple,
    kwargs: dict,
    live: list[Candidate],
    notes: list[str],
    step: Callable[[str], None] | None = None,
    synchronize: Callable[[Any], None] | None = None,
    workers: int = 1,
) -> float | None:
    """Run each of `live` once at this call and judge its result (step 3 of the module
    docstring): a candidate that raises is failed, one the criterion rejects wrong. With
    `workers` > 1 their kernels are built ahead in that many threads, and the wall time of
    that build is returned (else None); the runs and checks stay one at a time."""
    t = op.tunables
    base_kwargs = {k: v for k, v in kwargs.items() if k not in t.names}
    outputs: dict[tuple, list] = {}
    built_s = None
    if workers > 1 and len(live) > 1:
        if step is not None:
            step(f"build {len(live)} candidates in {workers} threads")
        began = time.perf_counter()
        for c, took in zip(live, _build_ahead(op, args, base_kwargs, live, workers)):
            c.build_s = took
        built_s = time.perf_counter() - began
    for c in live:
        if step is not None:
            step(f"run {t.describe(c.config)}")
        began = time.perf_counter()
        try:
            outputs[c.config] = _visible(op, op(*args, **base_kwargs, **dict(zip(t.names, c.config))))
            if synchronize is not None:
                synchronize(outputs[c.config])
        except Exception as e:
            c.status, c.reason = "failed", _one_line(e)
        c.first_call_s = time.perf_counter() - began + (c.build_s or 0.0)
    default = t.config_of({n: kwargs[n] for n in t.names if n in kwargs})
    _judge(op, args, base_kwargs, t, [c for c in live if c.status == "pending"], outputs, default, notes)
    return built_s


def _build_ahead(op: Any, args: tuple, base_kwargs: dict, live: list[Candidate], workers: int) -> list[float]:
    """Build (trace, lower, compile) each of `live`'s kernels at this call without running it,
    `workers` at a time; -> each one's build wall time, in `live`'s order. A build that fails
    is let be: the kernel cache keeps nothing of it, and the candidate's first call fails the
    same way (and is reported as it always is)."""
    t = op.tunables
    grad = torch.is_grad_enabled()  # thread-local, as the interpret mode (copied with the context)

    def one(config: tuple) -> float:
        began = time.perf_counter()
        with torch.set_grad_enabled(grad):
            try:
                prebuild.build(lambda: op(*args, **base_kwargs, **dict(zip(t.names, config))))
            except Exception:  # noqa: BLE001 - its first call raises it again, and says so
                pass
        return time.perf_counter() - began

    with ThreadPoolExecutor(workers, thread_name_prefix="tpu-kernels-tune") as pool:
        futures = [pool.submit(contextvars.copy_context().run, one, c.config) for c in live]
        return [f.result() for f in futures]


def _visible(op: Any, out: Any) -> list[Any]:
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    return outs[: op.n_visible]


def _judge(
    op: Any,
    args: tuple,
    base_kwargs: dict,
    t: Any,
    live: list[Candidate],
    outputs: dict[tuple, list],
    default: tuple,
    notes: list[str],
) -> None:
    """Mark each live candidate whose result the correctness criterion rejects as wrong."""
    if not live:
        return
    default_kwargs = {**base_kwargs, **dict(zip(t.names, default))}
    try:
        expected = checked_mode.reference_outputs(op, args, default_kwargs)
    except TypeError as e:  # a reference that cannot take the op's arguments by name
        raise TypeError(
            f"{op.name}: its reference could not be called to judge the tuning candidates ({e}). The "
            "tuner calls it with the op's arguments by name, those its signature takes (tunables it "
            "leaves out are not passed): name its parameters as the op's, or take **kwargs."
        ) from e
    ref = op.check_reference
    if expected is None:
        expected = _default_in_float64(op, args, default_kwargs)
        notes.append(
            "no reference covers this call: candidates compared with the declared default run in float64"
            if expected is not None
            else "no reference covers this call: candidates compared with the declared default's result"
        )
        if expected is None:
            base = outputs.get(default)
            if base is None:
                notes.append("the declared default did not run: the candidates could not be checked")
                for c in live:
                    c.status, c.reason = "failed", "no reference and no default result to compare with"
                return
            expected = [correctness.as_tensor(o).to(torch.float64) for o in base]
    values = op.signature.bind(args, default_kwargs)
    named = {p.name: v for p, v in zip(op.signature.params, values)}
    baseline = outputs.get(default)
    for c in live:
        ratios, reductions, why = [], [], ""
        for k, (got, want) in enumerate(zip(outputs[c.config], expected)):
            name = op.output_names[k]
            declared = ref.declared_reduction(named, name) if ref is not None else None
            reduction = correctness.reduction_length(declared, (*args, *base_kwargs.values()))
            scale = ref.size(named, name) if ref is not None else 1.0
            got_t = correctness.as_tensor(got)
            check = correctness.check(
                got_t,
                want,
                got_t.dtype if got_t.is_floating_point() else torch.float32,
                reduction=reduction,
                scale=scale,
                baseline=None if baseline is None or c.config == default else baseline[k],
            )
            ratios.append(check.ratio)
            reductions.append(reduction)
            if not check.passed and not why:
                why = (
                    f"output {name!r}: error {check.error:.3g} (max-norm {check.error_max:.3g}) against "
                    f"{check.allowed:.3g} allowed ({correctness.CRITERION} criterion)"
                )
        c.error_ratio = max(ratios, default=0.0)
        c.reduction = max(reductions, default=None)
        if why:
            c.status, c.reason = "wrong", why


def _default_in_float64(op: Any, args: tuple, kwargs: dict) -> list[torch.Tensor] | None:
    def wide(v: Any) -> Any:
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            return v.detach().cpu().to(torch.float64)
        return v

    try:
        out = op(*[wide(a) for a in args], **{k: wide(v) for k, v in kwargs.items()})
    except Exception:  # a kernel that takes no float64: the caller falls back
        return None
    return [correctness.as_tensor(o).to(torch.float64) for o in _visible(op, out)]


def _call(op: Any, config: tuple, names: tuple[str, ...]) -> Callable:
    statics = dict(zip(names, config))

    def run(a: tuple, kw: dict) -> Any:
        return op(*a, **{**kw, **statics})

    return run


def _input_sets(args: tuple, kwargs: dict, settings: timing.Settings, device: Device) -> list[tuple]:
    """The call's tensors and copies of them (new memory, same values) to rotate through, so no
    candidate is timed on inputs the previous call left in a cache; kwargs tensors too."""

    first = (tuple(args), dict(kwargs))
    size = timing.nbytes((args, list(kwargs.values())))
    default_rotate = 2 * last_level_cache_bytes() if device.type == "cpu" else 256 << 20
    more = timing.input_sets(
        lambda: (tuple(copy_value(a) for a in args), {k: copy_value(v) for k, v in kwargs.items()}),
        size,
        settings,
        default_rotate,
    )
    return [first, *more[1:]]


def _harness(device: Device, fns: dict, settings: timing.Settings) -> dict:
    return timing.measure(device, fns, settings)


def _one_line(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".strip().splitlines()
    return text[0] if text else type(e).__name__


__all__ = [
    "TUNING",
    "WORKERS_ENV",
    "Candidate",
    "CpuCheck",
    "Outcome",
    "build_workers",
    "measure_call",
    "predict_call",
    "predict_config",
]
