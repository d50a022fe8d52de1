"""The report's data model and its JSON and CSV forms.

JSON schema ("tpu_kernels.bench/1"), documented in docs/benchmarking.md:

    {"schema": "tpu_kernels.bench/1",
     "environment": {time, python, platform, cpu_count, load_average, packages{...}, git_commit},
     "device": {type, name, peaks: {flops_per_s, bytes_per_s, source} | null},
     "settings": {rounds, min_sample_s, warmup_s, ..., quick, sweep},
     "wall_s": the command's wall time (seconds), "cpu_s": the CPU time it used meanwhile,
     "timer": "wall-clock ..." (what the times are),
     "notes": [str, ...],
     "results": [{benchmark, point{...}, point_id, wall_s, flops, bytes, cost_source, input_sets,
                  candidates: [{name, implementation, primary, calls_per_sample,
                                warmup_calls, first_call_s,
                                time: {median, p10, p25, p75, p90, min, max, mean, stdev, cv, n} (seconds),
                                device_time_s, check: {passed, error, error_max, allowed, allowed_max,
                                       ratio, max_abs_err, reduction, criterion},
                                throughput: {tflops, gbps, pct_peak_flops, pct_peak_bw},
                                speedup, error}]}]}
"""

from __future__ import annotations

import csv
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = "tpu_kernels.bench/1"


class ReportError(ValueError):
    """A file that is not a readable benchmark report (missing, not JSON, incomplete)."""


@dataclass
class CandidateResult:
    name: str
    implementation: str | None = None
    primary: bool = False
    calls_per_sample: int = 0
    warmup_calls: int = 0
    first_call_s: float | None = None  # the first call of this point: tracing and compiling included
    time: dict | None = None  # stats.Summary.to_dict(), seconds per call
    device_time_s: float | None = None
    check: dict | None = None  # correctness.Check.to_dict()
    throughput: dict = field(default_factory=dict)
    speedup: float | None = None  # the baseline's median / this median
    error: str | None = None  # the candidate raised instead of running
    single_input_s: float | None = None  # a plain loop over the first input set only, per call
    notes: list[str] = field(default_factory=list)  # e.g. why the median and single_input_s differ

    @property
    def wrong(self) -> bool:
        return self.check is not None and not self.check["passed"]

    @property
    def median(self) -> float | None:
        return self.time["median"] if self.time else None


@dataclass
class PointResult:
    benchmark: str
    point: dict
    point_id: str
    flops: float | None = None
    bytes: float | None = None
    cost_source: str | None = None  # "formula", "pallas CostEstimate", "xla cost_analysis" or None
    input_sets: int = 0
    input_sets_bytes: int = 0
    candidates: list[CandidateResult] = field(default_factory=list)
    baseline: str | None = None  # the candidate speed-ups are measured against
    wall_s: float | None = None  # the point's wall time in the run: inputs, checks, every candidate

    def candidate(self, name: str) -> CandidateResult | None:
        return next((c for c in self.candidates if c.name == name), None)


@dataclass
class Report:
    environment: dict
    device: dict
    settings: dict
    timer: str
    notes: list[str] = field(default_factory=list)
    results: list[PointResult] = field(default_factory=list)
    schema: str = SCHEMA
    wall_s: float | None = None  # `tpu-kernels bench`'s wall time, from its start to the report
    # ... and the CPU time it used meanwhile (user + system, every thread and waited-for child):
    # unlike the wall time, not stretched by other work on a shared machine
    cpu_s: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Report:
        if not isinstance(data, dict):
            raise ReportError(
                f"holds a JSON {type(data).__name__}, not a tpu_kernels benchmark report (an object "
                f'with "schema": "{SCHEMA}")'
            )
        if data.get("schema") != SCHEMA:
            raise ReportError(
                f"not a tpu_kernels benchmark report (schema {data.get('schema')!r}, expected {SCHEMA!r})"
            )
        missing = [k for k in ("environment", "device", "settings", "timer", "results") if k not in data]
        if missing:
            raise ReportError(f"the report has no {', '.join(repr(k) for k in missing)}")
        if not isinstance(data["results"], list):
            raise ReportError("its 'results' is not a list")
        results = []
        for i, r in enumerate(data["results"]):
            if not isinstance(r, dict) or "candidates" not in r:
                raise ReportError(f"result {i} has no 'candidates' (a list of timed candidates)")
            try:
                candidates = [CandidateResult(**c) for c in r["candidates"]]
                results.append(PointResult(**{**r, "candidates": candidates}))
            except TypeError as e:  # an unknown or missing field
                raise ReportError(f"result {i} ({r.get('benchmark', '?')}) is malformed: {e}") from e
        try:
            return cls(**{**data, "results": results})
        except TypeError as e:
            raise ReportError(f"the report is malformed: {e}") from e

    def write_json(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_dict(), indent=1, default=_json_default) + "\n")

    @classmethod
    def read_json(cls, path: Path) -> Report:
        """Read a report that `tpu-kernels bench` wrote; ReportError (naming the file and what
        to do) when the file is missing, not JSON, or not a complete report."""
        path = Path(path)
        try:
            text = path.read_text()
        except FileNotFoundError:
            raise ReportError(
                f"{path}: no such file; give the report.json a `tpu-kernels bench` run wrote "
                "(bench-results/<time>/report.json)"
            ) from None
        except OSError as e:
            raise ReportError(f"{path}: cannot read it ({e.strerror or e})") from e
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ReportError(
                f"{path}: not valid JSON ({e.msg}: line {e.lineno} column {e.colno}); the file may be "
                "truncated: write it again with `tpu-kernels bench --out DIR`"
            ) from e
        try:
            return cls.from_dict(data)
        except ReportError as e:
            raise ReportError(f"{path}: {e}; give a report.json that `tpu-kernels bench` wrote") from e

    def write_csv(self, path: Path) -> None:
        """One row per (benchmark, point, candidate)."""
        fields = [
            "benchmark",
            "point_id",
            "candidate",
            "implementation",
            "primary",
            "median_s",
            "p10_s",
            "p25_s",
            "p75_s",
            "p90_s",
            "cv",
            "n",
            "calls_per_sample",
            "first_call_s",
            "single_input_s",
            "device_time_s",
            "correct",
            "max_abs_err",
            "error_vs_allowed",
            "tflops",
            "gbps",
            "pct_peak_flops",
            "pct_peak_bw",
            "speedup",
            "flops",
            "bytes",
            "error",
        ]
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            for r in self.results:
                for c in r.candidates:
                    t = c.time or {}
                    w.writerow(
                        {
                            "benchmark": r.benchmark,
                            "point_id": r.point_id,
                            "candidate": c.name,
                            "implementation": c.implementation or "",
                            "primary": c.primary,
                            "median_s": t.get("median"),
                            "p10_s": t.get("p10"),
                            "p25_s": t.get("p25"),
                            "p75_s": t.get("p75"),
                            "p90_s": t.get("p90"),
                            "cv": t.get("cv"),
                            "n": t.get("n"),
                            "calls_per_sample": c.calls_per_sample,
                            "first_call_s": c.first_call_s,
                            "single_input_s": c.single_input_s,
                            "device_time_s": c.device_time_s,
                            "correct": None if c.check is None else c.check["passed"],
                            "max_abs_err": None if c.check is None else c.check["max_abs_err"],
                            "error_vs_allowed": None if c.check is None else c.check.get("ratio"),
                            **{
                                k: c.throughput.get(k)
                                for k in ("tflops", "gbps", "pct_peak_flops", "pct_peak_bw")
                            },
                            "speedup": c.speedup,
                            "flops": r.flops,
                            "bytes": r.bytes,
                            "error": c.error or "",
                        }
                    )


def _json_default(o: Any) -> Any:
    if isinstance(o, tuple):
        return list(o)
    return str(o)
