"""The VMEM check held against a chip: its prediction for each call of the calibration corpus
(`tpu_kernels.chip.corpus`) beside the chip's own compile verdict.

The chip runner compiles every corpus call on a TPU and writes the verdicts as a record,
`bench/reports/chip_corpus_<chip>.json`: {"chip", "jax", "calls": [{"id", "compiles", "error"}]}.
`predict(call)` is what `tpu-kernels check` would say of the call's kernels on that chip;
`compare(record)` pairs the two for every call of the record, and `summary` counts agreement
and the calls the check passes though the chip refused them (false passes: the check's
worst mistake). tests/lowering_check/test_chip_corpus.py holds the check to the committed record.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tpu_kernels.lowering.export import lowering_for_tpu
from tpu_kernels.lowering.target import chip
from tpu_kernels.lowering_check import vmem

REPORTS = Path(__file__).resolve().parents[2] / "bench" / "reports"


def record_path(chip_name: str = "v5e") -> Path:
    return REPORTS / f"chip_corpus_{chip_name}.json"


def predict(call: Any, chip_name: str = "v5e") -> tuple[bool, int | None, int]:
    """(fits, estimate in bytes, limit in bytes) of a corpus call's kernels on `chip_name`, by
    the check's own rule (`vmem.verdict`); the kernel with the least margin speaks for the call.
    A call that raises while tracing fails, as the check fails a call that does not lower
    (estimate None)."""
    target = chip(chip_name)
    try:
        with lowering_for_tpu(target):
            eqns = vmem.traced_pallas_calls(call.fn, *call.args)
            verdicts = [vmem.verdict(vmem.footprint(e), target) for e in eqns]
    except Exception:
        return False, None, target.scoped_vmem_bytes
    if not verdicts:
        return True, 0, target.scoped_vmem_bytes
    worst = min(verdicts, key=lambda v: v.margin)
    return all(v.fits for v in verdicts), worst.estimate, worst.limit


@dataclass(frozen=True)
class Row:
    id: str
    compiles: bool  # the chip's verdict
    fits: bool  # the check's
    estimate: int | None
    limit: int
    error: str | None  # the chip's message when it refused

    @property
    def agrees(self) -> bool:
        return self.compiles == self.fits

    def describe(self) -> str:
        est = "no estimate" if self.estimate is None else f"estimate {vmem.fmt_bytes(self.estimate)}"
        chip_says = "compiles" if self.compiles else f"refused ({(self.error or '')[:160]})"
        check_says = "fits" if self.fits else "does not fit"
        return f"{self.id}: chip {chip_says}; check {check_says} ({est}, limit {vmem.fmt_bytes(self.limit)})"


def load(path: Path) -> dict:
    """A chip corpus record: {"chip", "calls": [...]}, or the chip runner's own record of
    `python -m tpu_kernels.chip --sections corpus --out bench/reports/chip_corpus_v5e.json`
    ({"meta": ..., "corpus": {"rows": [...]}}), read as the former."""
    record = json.loads(path.read_text())
    if "calls" not in record and isinstance(record.get("corpus", {}).get("rows"), list):
        kind = record.get("meta", {}).get("device_kind", "")
        record = {"chip": "v5e" if "v5" in kind and "lite" in kind else kind, "jax": record.get("meta", {}).get("jax"),
                  "calls": record["corpus"]["rows"]}
    if not isinstance(record.get("calls"), list):
        raise ValueError(f"{path}: a chip corpus record has a 'calls' list of {{id, compiles, error}}.")
    return record


def compare(record: dict, calls: list[Any], chip_name: str | None = None) -> tuple[list[Row], list[str]]:
    """(a Row per call of the record found in `calls`, the record's ids not in `calls`)."""
    by_id = {c.id: c for c in calls}
    name = chip_name or str(record.get("chip", "v5e"))
    rows, missing = [], []
    for entry in record["calls"]:
        call = by_id.get(entry["id"])
        if call is None:
            missing.append(entry["id"])
            continue
        fits, estimate, limit = predict(call, name)
        rows.append(Row(entry["id"], bool(entry["compiles"]), fits, estimate, limit, entry.get("error")))
    return rows, missing


def summary(rows: list[Row]) -> dict:
    """{"calls", "agree", "agreement", "false_passes", "false_fails"}."""
    agree = sum(r.agrees for r in rows)
    return {
        "calls": len(rows),
        "agree": agree,
        "agreement": agree / len(rows) if rows else 1.0,
        "false_passes": [r for r in rows if r.fits and not r.compiles],
        "false_fails": [r for r in rows if r.compiles and not r.fits],
    }
