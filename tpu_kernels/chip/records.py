"""Chip records updated point by point: a later run re-measures some points of a section.

A session's device time rarely fits the whole grid, so a run may measure only what changed
(`python -m tpu_kernels.chip --update --only REGEX`) and replace those rows, by id, in the
committed record; every row carries the commit it was measured at, and the report says which
commits the record's rows come from.

    python -m tpu_kernels.chip.records INTO.json FROM.json [SECTION ...]   # FROM's rows replace INTO's
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

SECTIONS = ("grid", "precision", "layer", "tune", "corpus", "drawn", "drawn_layer", "drawn_tune")


def stamped(rows: list[dict[str, Any]], commit: str) -> list[dict[str, Any]]:
    """Rows with their commit (a row that has one keeps it)."""
    return [{**r, "commit": r.get("commit") or commit} for r in rows]


def _key(row: dict[str, Any]) -> tuple[str, str]:
    """What makes a row the same point: its id and its statics (a tuning sweep's rows share the
    id of their shape and differ in their config)."""
    return row["id"], json.dumps(row.get("statics", {}), sort_keys=True)


def update(record: dict[str, Any], key: str, section: dict[str, Any]) -> None:
    """Put `section`'s rows into `record[key]`: a row of a point already there (`_key`) replaces
    it in place, so the table's order stays; new points are appended."""
    new = stamped(section["rows"], section.get("commit", ""))
    old = record.get(key)
    if old is None:
        record[key] = {**section, "rows": new}
        return
    rows = stamped(old["rows"], old.get("commit", ""))
    where = {_key(r): i for i, r in enumerate(rows)}
    for r in new:
        if _key(r) in where:
            rows[where[_key(r)]] = r
        else:
            rows.append(r)
    record[key] = {**old, "rows": rows, "commit": section.get("commit", old.get("commit", "")),
                   "seconds": round(old.get("seconds", 0) + section.get("seconds", 0), 1)}


def commits(record: dict[str, Any]) -> Counter:
    """How many rows of the record were measured at each commit."""
    return Counter(r.get("commit") or record[k].get("commit", "") for k in SECTIONS if k in record
                   for r in record[k]["rows"])


def merge(into: Path, source: Path, sections: tuple[str, ...] = SECTIONS) -> dict[str, Any]:
    """`source`'s rows of `sections` into the record at `into` (rewritten), with the run noted
    in its meta."""
    record = json.loads(into.read_text())
    new = json.loads(source.read_text())
    keys = [k for k in sections if k in new]
    for key in keys:
        update(record, key, new[key])
    runs = record["meta"].setdefault("runs", [])
    runs.append({"commit": new["meta"].get("commit", ""), "sections": ", ".join(keys),
                 "seconds": round(sum(new[k].get("seconds", 0) for k in keys), 1)})
    into.write_text(json.dumps(record, indent=1, sort_keys=True, default=str) + "\n")
    return record


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2 or set(argv[2:]) - set(SECTIONS):
        print(__doc__.strip().splitlines()[-1].strip(), f"(sections: {', '.join(SECTIONS)})", file=sys.stderr)
        return 2
    merge(Path(argv[0]), Path(argv[1]), tuple(argv[2:]) or SECTIONS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
