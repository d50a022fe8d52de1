"""What a tuning run found: per op, chip and shape bucket, every candidate's fate and the winner.

A `TuningResult` is saved into each op's table (`save()`; `tpu_kernels.tunables.table` says
where and how), printed as a report (`report()`), and is a context manager, as Tokamax's
`AutotuningResult` is: inside `with result:` this thread's calls use its configs first, without
anything written to disk.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tpu_kernels import tunables
from tpu_kernels.autotuner.point import Outcome
from tpu_kernels.bench.stats import fmt_time
from tpu_kernels.tunables import lookup
from tpu_kernels.tunables import table as tables


@dataclass
class TuningResult:
    outcomes: list[Outcome] = field(default_factory=list)
    tokamax: dict[str, Any] = field(default_factory=dict)  # device kind -> Tokamax AutotuningResult
    helion: list[str] = field(default_factory=list)  # what Helion's autotuner was asked to do
    notes: list[str] = field(default_factory=list)
    _ops: dict[str, Any] = field(default_factory=dict, repr=False)  # op name -> KernelOp
    _tokens: list[Any] = field(default_factory=list, repr=False)

    def entries(self) -> dict[str, list[tunables.Entry]]:
        """The table entries, by op name (outcomes where no candidate survived give none)."""
        out: dict[str, list[tunables.Entry]] = {}
        for o in self.outcomes:
            e = o.entry()
            if e is not None:
                out.setdefault(o.op, []).append(e)
        return out

    def tables(self) -> dict[str, tables.Table]:
        """The result as one table per op (what `save` merges into the files)."""
        out = {}
        for name, entries in self.entries().items():
            t = tables.Table(name, self._ops[name].tunables.space())
            t.add(entries)
            out[name] = t
        return out

    def to_json(self) -> str:
        """Every op's table in one JSON document: {op: table}."""
        return json.dumps({n: json.loads(t.to_json()) for n, t in self.tables().items()}, indent=1) + "\n"

    def save(self, directory: str | Path | None = None) -> list[Path]:
        """Merge the entries into each op's table file: in `directory`, else the op's write path
        (`$TPU_KERNELS_TUNING_DIR`, else beside the kernel). Calls in this process use them at once."""
        written = []
        for name, entries in self.entries().items():
            op = self._ops[name]
            path = (
                Path(directory) / tables.filename(name)
                if directory is not None
                else lookup.write_path(name, op.tuned.home)
            )
            tables.write(path, name, op.tunables.space(), entries)
            lookup.added(name, entries)
            written.append(path)
        if self.tokamax:
            from tpu_kernels.autotuner import delegate

            written += delegate.save_tokamax(self.tokamax, directory)
        return written

    def __enter__(self) -> TuningResult:
        overlay: dict[str, dict] = {}
        for name, entries in self.entries().items():
            overlay[name] = {e.key: e for e in entries}
        self._tokens.append(lookup.push_overlay(overlay))
        return self

    def __exit__(self, *exc: Any) -> None:
        lookup.pop_overlay(self._tokens.pop())

    def report(self) -> str:
        """The run as text: per op, chip and call, each candidate and the choice."""
        lines: list[str] = []
        for o in self.outcomes:
            head = f"{o.op}  chip={o.chip} ({o.source})  shapes={o.shapes}  dtypes={list(o.dtypes)}  bucket={list(o.bucket)}"
            lines.append(head)
            lines += _candidate_rows(o)
            if o.choice is None:
                lines.append(
                    "  no candidate survived: recorded as a failed entry; calls here raise NoRightConfigError"
                    if o.source == "measured"
                    else "  no candidate survived: the op keeps its declared defaults here"
                )
            else:
                how = (
                    "decisive"
                    if o.choice.decisive
                    else f"tied with {len(o.choice.tied) - 1} other(s); declared order decides"
                )
                lines.append(f"  chosen: {', '.join(f'{k}={v}' for k, v in o.chosen.items())} ({how})")
            lines.append(_times(o))
            for n in o.notes:
                lines.append(f"  note: {n}")
            if o.source == "predicted":
                lines.append(f"  model: {o.method.get('model')}")
                if "checked_by" in o.method:
                    lines.append(f"  results checked by {o.method['checked_by']}")
                if "checked_at" in o.method:
                    lines.append(f"  results checked in the CPU interpreter at shapes {o.method['checked_at']}")
            lines.append("")
        for kind, result in self.tokamax.items():
            lines.append(f"tokamax: {len(result.data)} op call(s) tuned by Tokamax's autotuner for {kind!r}")
        lines += [f"helion: {h}" for h in self.helion]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines).rstrip() + "\n"


REASON_WIDTH = 100
"""The width the reason column wraps at (wrapped at spaces, never cut)."""


def _candidate_rows(o: Outcome) -> list[str]:
    """One row per candidate: config, status, time (median or predicted), spread, first call
    (tracing, compiling and one run), error/allowed, and the reason, whole, wrapped."""
    head = ("config", "status", "median" if o.source == "measured" else "predicted", "p10-p90", "first call", "error/allowed")
    rows = [head]
    reasons = [""]
    for c in o.candidates:
        cfg = ", ".join(f"{n}={v}" for n, v in zip(o.names, c.config))
        if c.timing is not None:
            t, spread = fmt_time(c.timing.median), f"{fmt_time(c.timing.p10)}-{fmt_time(c.timing.p90)}"
        elif c.prediction is not None:
            t, spread = fmt_time(c.prediction.seconds), "-"
        else:
            t, spread = "-", "-"
        first = "-" if c.first_call_s is None else fmt_time(c.first_call_s)
        ratio = "-" if c.error_ratio is None else f"{c.error_ratio:.2f}"
        rows.append((cfg, c.status, t, spread, first, ratio))
        reasons.append(c.reason)
    n = len(head)
    widths = [max(len(r[i]) for r in rows) for i in range(n)]
    indent = 2 + sum(widths) + 2 * n
    out = []
    for r, why in zip(rows, [*["why"], *reasons[1:]]):
        cells = "  " + "  ".join(r[i].ljust(widths[i]) for i in range(n))
        wrapped = textwrap.wrap(why, REASON_WIDTH, break_long_words=False, break_on_hyphens=False) or [""]
        out.append((cells + "  " + wrapped[0]).rstrip())
        out += [" " * indent + more for more in wrapped[1:]]
    return out


def _times(o: Outcome) -> str:
    """Where the tuning's time went: first calls (compiles), timing passes, the whole."""
    firsts = [c.first_call_s for c in o.candidates if c.first_call_s is not None]
    parts = []
    if firsts:
        where = " in the CPU check" if o.source == "predicted" else ""
        parts.append(
            f"first calls{where} {fmt_time(sum(firsts))} ({len(firsts)} candidates: tracing, compiling, one run)"
        )
    if "build_s" in o.method:  # built ahead in threads: the wall time of that build, of all of them
        workers, wall = o.method["build_workers"], fmt_time(o.method["build_s"])
        parts.append(f"built in {workers} threads in {wall} (wall)")
    if "timing_s" in o.method:
        passes = len(o.method.get("passes", []))
        stable = "the choice stable" if o.method.get("stable", True) else "the choice NOT stable"
        parts.append(f"timing {fmt_time(o.method['timing_s'])} in {passes} pass(es), {stable}")
    if "total_s" in o.method:
        parts.append(f"total {fmt_time(o.method['total_s'])}")
    return "  time: " + "; ".join(parts)


def merge(results: Sequence[TuningResult]) -> TuningResult:
    out = TuningResult()
    for r in results:
        out.outcomes += r.outcomes
        out.helion += r.helion
        out.notes += r.notes
        out._ops.update(r._ops)
        for k, v in r.tokamax.items():
            out.tokamax[k] = out.tokamax[k] | v if k in out.tokamax else v
    return out
