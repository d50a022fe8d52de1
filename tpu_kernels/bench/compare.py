"""Compare a report with a saved baseline: regressions over a threshold fail the run.

A point regressed when its median grew by more than `threshold` (0.10 = 10%) AND
the two runs' interquartile ranges do not overlap (new p25 > old p75), so noise
alone does not fail CI. A candidate that was right and is now wrong (its correctness check,
tpu_kernels.bench.correctness, failed) is a regression too, whatever its speed; when the
baseline report was judged by another correctness rule, the reason says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from tpu_kernels.bench.results import CandidateResult, Report


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


def compare(baseline: Report, current: Report, threshold: float = 0.10) -> list[Change]:
    old = {(r.benchmark, r.point_id, c.name): c for r in baseline.results for c in r.candidates}
    changes = []
    for r in current.results:
        for c in r.candidates:
            prev = old.get((r.benchmark, r.point_id, c.name))
            if prev is None:
                continue
            ratio = c.median / prev.median if (c.median and prev.median) else None
            regressed, reason = False, ""
            if c.wrong and not prev.wrong:
                regressed, reason = True, "result now wrong" + _rule_changed(prev, c)
            elif c.error and not prev.error:
                regressed, reason = True, f"now fails: {c.error}"
            elif ratio is not None and ratio > 1 + threshold and c.time["p25"] > prev.time["p75"]:
                regressed, reason = True, f"{(ratio - 1) * 100:.0f}% slower"
            changes.append(
                Change(r.benchmark, r.point_id, c.name, prev.median, c.median, ratio, regressed, reason)
            )
    return changes


def _rule_changed(prev: CandidateResult, new: CandidateResult) -> str:
    """A note when the two verdicts come from different correctness rules: the wrong result is
    still a regression (it is wrong by today's rule), but the old "ok" may not have been."""
    rules = [(r.check or {}).get("criterion", "per-element") for r in (prev, new)]
    if rules[0] == rules[1]:
        return ""
    return f" (the baseline report judged by the {rules[0]} rule, this one by the {rules[1]} rule)"


def regressions(changes: list[Change]) -> list[Change]:
    return [c for c in changes if c.regressed]


def markdown_table(changes: list[Change], threshold: float) -> str:
    """The comparison as a GitHub-flavoured Markdown table, for a pull request."""
    from tpu_kernels.bench.console import fmt_time

    bad = regressions(changes)
    lines = [
        f"**{len(bad)} regression(s)** among {len(changes)} measurements (threshold {threshold:.0%})",
        "",
        "| benchmark | point | candidate | before | after | change | verdict |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    for c in changes:
        change = "-" if c.ratio is None else f"{(c.ratio - 1) * 100:+.1f}%"
        verdict = f"**REGRESSION** {c.reason}" if c.regressed else "ok"
        cells = [c.benchmark, c.point_id, c.candidate, fmt_time(c.old_median), fmt_time(c.new_median), change]
        lines.append("| " + " | ".join(x.replace("|", "\\|") for x in [*cells, verdict]) + " |")
    return "\n".join(lines) + "\n"
