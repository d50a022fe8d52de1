"""`tpu-kernels check --sharding`: each op's DTensor rule, derived from its kernel and simulated.

For every op (backward ops included) at each of its example calls, shrunk and filled
with random values (`tpu_kernels.sharding.simulate.example_calls`; a backward op's are the
calls its forward's lead to):

- the rule: what `sharding=` declared ("pointwise", "rowwise(...)", a function's
  name, "derived"), or "none";
- the derived rule: the strategies `tpu_kernels.sharding.derive` reads off the
  kernel, beside the rule's own (the same, or which strategies only one offers), and
  why each other dim is not shardable (dependent, or undecided);
- the simulation: every strategy of the rule on 2 and 3 shards against the unsharded
  call. A disagreeing strategy fails the op (exit status 1).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from tpu_kernels.op import KernelOp


@dataclasses.dataclass
class CallReport:
    call: str
    derived: list[str] | None  # strategy texts; None when the derivation raised
    rule: list[str]
    notes: list[str]
    error: str | None = None  # why the derivation could not run


@dataclasses.dataclass
class ShardingReport:
    op: str
    rule: str
    status: str  # "ok", "failed", "skipped"
    calls: list[CallReport] = dataclasses.field(default_factory=list)
    checked: int = 0
    failures: list[str] = dataclasses.field(default_factory=list)
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def check_sharding(op: KernelOp) -> ShardingReport:
    """Derive and simulate `op`'s rule at its example calls (see the module docstring)."""
    from tpu_kernels import sharding
    from tpu_kernels.lowering_check.examples import describe_call, forward_of
    from tpu_kernels.sharding import simulate as sharding_sim

    rule = sharding.describe(sharding.rule_of(op))
    fwd = forward_of(op)
    if fwd is not None:
        fwd_calls = sharding_sim.example_calls(fwd)
        calls = sharding_sim.backward_calls(fwd, op, fwd_calls) if fwd_calls else None
    else:
        calls = sharding_sim.example_calls(op)
    if not calls:
        return ShardingReport(op.name, rule, "skipped", reason="no example calls (give the op examples=)")
    report = ShardingReport(op.name, rule, "ok")
    fn = sharding.strategies_of(op)
    not_simulated: list[str] = []
    for args, kwargs in calls:
        call = CallReport(describe_call(args, kwargs), None, [], [])
        report.calls.append(call)
        _derive(op, args, kwargs, call)
        if fn is None:
            continue
        try:
            with sharding.simulating():
                found = sharding_sim.strategies_at(op, fn, args, kwargs, 2)
            names = [p.name for p in op.signature.params[: len(args)]] + list(kwargs)
            call.rule = [sharding_sim.strategy_text(names, i, o) for o, i in found if _sharded(o, i)]
            sim = sharding_sim.simulate_call(op, args, kwargs)
        except Exception as e:  # noqa: BLE001 - a rule or kernel error is this op's finding
            report.failures.append(f"{call.call}: {type(e).__name__}: {e}")
            continue
        report.checked += len(sim.checked)
        report.failures += [str(f) for f in sim.failures]
        not_simulated += sim.skipped
    if fn is None:
        report.status, report.reason = "skipped", "no sharding rule (sharding=)"
    elif report.failures:
        report.status = "failed"
    elif not report.checked and not_simulated:
        # nothing was simulated (an op that mutates its arguments): not a pass
        report.status, report.reason = "skipped", "; ".join(dict.fromkeys(not_simulated))
    return report


def _sharded(outs: list[Any], ins: list[Any]) -> bool:
    return any(p is not None and type(p).__name__ != "Replicate" for p in [*outs, *ins])


def _derive(op: KernelOp, args: tuple, kwargs: dict, call: CallReport) -> None:
    from tpu_kernels.sharding import simulate as sharding_sim
    from tpu_kernels.sharding.derive import derive

    try:
        d = derive(op, args, kwargs)
    except Exception as e:  # noqa: BLE001 - reported: the derivation cannot run on this op
        call.error = f"{type(e).__name__}: {e}"
        return
    call.derived = [
        sharding_sim.strategy_text(list(ins), list(ins.values()), outs) for outs, ins in d.strategies[1:]
    ]
    call.notes = [str(n) for n in d.notes]


def print_report(report: ShardingReport, width: int, out: TextIO) -> None:
    label = {"ok": "ok", "failed": "FAILED", "skipped": "skipped"}[report.status]
    if report.status == "skipped" and not report.calls:
        print(f"{label:<8} {report.op:<{width}}  rule {report.rule}: {report.reason}", file=out)
        return
    summary = report.reason or f"{report.checked} strategy runs simulated, {len(report.failures)} wrong"
    print(f"{label:<8} {report.op:<{width}}  rule {report.rule}: {summary}", file=out)
    pad = " " * 11
    for c in report.calls:
        print(f"{pad}at {c.call}", file=out)
        if c.error is not None:
            print(f"{pad}  derived: cannot derive ({c.error})", file=out)
        else:
            print(f"{pad}  derived: {'; '.join(c.derived or []) or 'nothing shardable'}", file=out)
            if c.rule or report.rule != "none":
                only_rule = [s for s in c.rule if s not in (c.derived or [])]
                only_derived = [s for s in (c.derived or []) if s not in c.rule]
                if not only_rule and not only_derived:
                    print(f"{pad}  the rule offers the same", file=out)
                if only_rule:
                    print(f"{pad}  the rule also offers: {'; '.join(only_rule)}", file=out)
                if only_derived:
                    print(f"{pad}  only derived: {'; '.join(only_derived)}", file=out)
        for n in c.notes:
            print(f"{pad}  not derived: {n}", file=out)
    for f in report.failures:
        print(f"{pad}error (sharding): {f}", file=out)


def run_all(ops: list[KernelOp], out: TextIO) -> list[ShardingReport]:
    """`check_sharding` of every op, printed as it goes."""
    print("Sharding rules, derived from the kernels and simulated on 2 and 3 shards:", file=out)
    width = max(len(op.name) for op in ops)
    reports = []
    for op in ops:
        r = check_sharding(op)
        reports.append(r)
        print_report(r, width, out)
        out.flush()
    return reports


__all__ = ["CallReport", "ShardingReport", "check_sharding", "print_report", "run_all"]
