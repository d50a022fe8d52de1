"""A pytest plugin for the mutation runner: tests whose name matches TPU_KERNELS_MUTATE_FIRST (a
regular expression) run first. With `-x` the run stops at the first failure, so putting the
sharp, quick tests (one-rounding, range, block sizes, lowering) ahead of the slow broad ones
makes a caught mutant cost seconds instead of the whole file; the set of tests is unchanged."""

from __future__ import annotations

import os
import re


def pytest_collection_modifyitems(session, config, items):
    pattern = os.environ.get("TPU_KERNELS_MUTATE_FIRST")
    if not pattern:
        return
    first = re.compile(pattern)
    items.sort(key=lambda item: 0 if first.search(item.name) else 1)  # stable: file order otherwise
