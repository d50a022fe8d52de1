"""With -v, print the largest error measured per op and dtype against the float64 references."""

from __future__ import annotations

from collections import defaultdict

from tests.tokamax.util import MEASURED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not MEASURED or config.option.verbose < 1:
        return
    worst: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for (op, _case, dtype, what), err in MEASURED.items():
        kind = "out" if what.startswith("out") else "grad"
        row = worst[(op, dtype)]
        row[kind] = max(row.get(kind, 0.0), err)
    terminalreporter.section("tokamax: max abs error vs float64 torch reference")
    for (op, dtype), row in sorted(worst.items()):
        grad = f"{row['grad']:.2e}" if "grad" in row else "-"
        terminalreporter.write_line(f"{op:<36} {dtype:<9} out {row.get('out', 0.0):.2e}  grad {grad}")
