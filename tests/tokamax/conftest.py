"""With -v, print the largest error measured per op and dtype against the float64 references.
Where tokamax is not installed (Python 3.11: scripts/test-py311), each module here is reported
skipped, with the reason, instead of failing to import."""

from __future__ import annotations

from collections import defaultdict

import pytest

from tests.helpers import HAS_TOKAMAX, NO_TOKAMAX
from tests.tokamax.util import MEASURED


class _WithoutTokamax(pytest.Module):
    def collect(self):
        raise pytest.skip.Exception(NO_TOKAMAX, allow_module_level=True)


def pytest_pycollect_makemodule(module_path, parent):
    if not HAS_TOKAMAX:
        return _WithoutTokamax.from_parent(parent, path=module_path)
    return None


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
