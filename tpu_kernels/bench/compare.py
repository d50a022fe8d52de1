"""Compare a report with a saved baseline: regressions of the op under test fail the run.

Only the op under test can regress: the candidates marked `primary` (the suites' `tpu_kernels`),
or, in a report without one, every candidate but the point's baseline. The others (torch, the
JAX function, torch.compile) are yardsticks: their changes are shown, never a regression.

The op under test is slower when all three hold, so that noise alone does not fail CI:

- its median grew by more than `threshold` (0.10 = 10%);
- the two runs' spreads are apart: the new run's p10 is above the old run's p90 (the middle
  80% of the samples of each run do not overlap);
- when the point's baseline candidate ran in both reports, the op's median relative to the
  baseline's also grew by more than `threshold`: candidates are timed in interleaved rounds, so
  a machine that is busier in one run slows the baseline alike, and that is not the op.

But a yardstick can move far more than the op: on a busy machine torch's threads fight the load
and its time can grow far more than the op's, so that relative to it a much slower op "improved". When the op is slower by the first two rules and the baseline slowed
by more than `threshold` beyond the op, the change is `inconclusive`, never ok: the run cannot say
whether the op regressed (`tpu-kernels compare` exits EXIT_INCONCLUSIVE; run it again quieter).

A candidate under test that was right and is now wrong (its correctness check,
tpu_kernels.bench.correctness, failed) or now fails to run is a regression too, whatever its
speed; when the baseline report was judged by another correctness rule, the reason says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from tpu_kernels.bench.results import CandidateResult, PointResult, Report

NOT_UNDER_TEST = "not the op under test"


@dataclass(frozen=True)
class Change:
    benchmark: str
    point_id: str
    candidate: str
    old_median: float | None
    new_median: float | None
    ratio: float | None  # new / old
    regressed: bool
    reason: str
    inconclusive: bool = False  # slower, beside a baseline that moved far more: cannot tell


def compare(baseline: Report, current: Report, threshold: float = 0.10) -> list[Change]:
    old = {(r.benchmark, r.point_id, c.name): c for r in baseline.results for c in r.candidates}
    changes = []
    for r in current.results:
        tested = under_test(r)
        old_base = old.get((r.benchmark, r.point_id, r.baseline or ""))
        new_base = r.candidate(r.baseline) if r.baseline else None
        for c in r.candidates:
            prev = old.get((r.benchmark, r.point_id, c.name))
            if prev is None:
                continue
            ratio = c.median / prev.median if (c.median and prev.median) else None
            yardstick = None if c.name not in tested else _baseline_ratio(old_base, new_base)
            problem, unsure = _problem(prev, c, ratio, yardstick, threshold, r.baseline)
            regressed = bool(problem) and c.name in tested and not unsure
            judged = regressed or unsure or not problem
            reason = problem if judged else f"{problem} ({NOT_UNDER_TEST})"
            changes.append(
                Change(
                    r.benchmark, r.point_id, c.name, prev.median, c.median, ratio, regressed, reason, unsure
                )
            )
    return changes


def under_test(point: PointResult) -> set[str]:
    """The candidates whose changes can be regressions: the primary ones, or every candidate
    but the baseline in a point without one."""
    primary = {c.name for c in point.candidates if c.primary}
    return primary or {c.name for c in point.candidates if c.name != point.baseline}


def _baseline_ratio(old: CandidateResult | None, new: CandidateResult | None) -> float | None:
    """How much slower the point's baseline ran in the new report (None: not timed in both)."""
    if old is None or new is None or not (old.median and new.median):
        return None
    return new.median / old.median


def _problem(
    prev: CandidateResult,
    new: CandidateResult,
    ratio: float | None,
    baseline_ratio: float | None,
    threshold: float,
    baseline: str | None,
) -> tuple[str, bool]:
    """What got worse from `prev` to `new` beyond the noise, or "", and whether that is
    inconclusive (slower, beside a baseline that slowed far more)."""
    if new.wrong and not prev.wrong:
        return "result now wrong" + _rule_changed(prev, new), False
    if new.error and not prev.error:
        return f"now fails: {new.error}", False
    if ratio is None or ratio <= 1 + threshold or not _apart(prev.time, new.time):
        return "", False
    slower = f"{(ratio - 1) * 100:.0f}% slower"
    if baseline_ratio is None:
        return slower, False
    relative = ratio / baseline_ratio
    if relative * (1 + threshold) < 1:  # the yardstick moved far more than the op: no verdict
        return (
            f"{slower}, but {baseline} {baseline_ratio:.3g}x slower: the baseline moved far more than "
            f"the op, so this run cannot tell; run again on a quieter machine",
            True,
        )
    if relative <= 1 + threshold:  # the baseline slowed alike: the machine, not the op
        return "", False
    return f"{slower} ({(relative - 1) * 100:.0f}% relative to {baseline})", False


def _apart(old: dict, new: dict) -> bool:
    """The new run's samples sit above the old run's: p10 over p90 (p25 over p75 in a report
    that lacks them)."""
    low, high = ("p10", "p90") if "p10" in new and "p90" in old else ("p25", "p75")
    return new[low] > old[high]


def _rule_changed(prev: CandidateResult, new: CandidateResult) -> str:
    """A note when the two verdicts come from different correctness rules: the wrong result is
    still a regression (it is wrong by today's rule), but the old "ok" may not have been."""
    rules = [(r.check or {}).get("criterion", "per-element") for r in (prev, new)]
    if rules[0] == rules[1]:
        return ""
    return f" (the baseline report judged by the {rules[0]} rule, this one by the {rules[1]} rule)"


def regressions(changes: list[Change]) -> list[Change]:
    return [c for c in changes if c.regressed]


def inconclusive(changes: list[Change]) -> list[Change]:
    return [c for c in changes if c.inconclusive]


def verdict(change: Change) -> str:
    """The verdict column: REGRESSION and why, INCONCLUSIVE and why, or ok (with what changed
    in a yardstick)."""
    if change.regressed:
        return f"REGRESSION {change.reason}"
    if change.inconclusive:
        return f"INCONCLUSIVE {change.reason}"
    return f"ok ({change.reason})" if change.reason else "ok"


def markdown_table(changes: list[Change], threshold: float) -> str:
    """The comparison as a GitHub-flavoured Markdown table, for a pull request."""
    from tpu_kernels.bench.stats import fmt_time

    bad, unsure = regressions(changes), inconclusive(changes)
    lines = [
        f"**{len(bad)} regression(s)**, {len(unsure)} inconclusive, among {len(changes)} measurements "
        f"(threshold {threshold:.0%})",
        "",
        "| benchmark | point | candidate | before | after | change | verdict |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    for c in changes:
        change = "-" if c.ratio is None else f"{(c.ratio - 1) * 100:+.1f}%"
        text = verdict(c).replace("REGRESSION", "**REGRESSION**", 1) if c.regressed else verdict(c)
        cells = [c.benchmark, c.point_id, c.candidate, fmt_time(c.old_median), fmt_time(c.new_median), change]
        lines.append("| " + " | ".join(x.replace("|", "\\|") for x in [*cells, text]) + " |")
    return "\n".join(lines) + "\n"
