"""Every Tokamax op declares a DTensor sharding rule, an autocast policy and a checked-mode
reference, and docs/tokamax.md lists the rules and policies as the code declares them.

Read from FAMILIES: an op added to a family without `sharding=` or `check_reference=`
fails here, and so does a rule changed without its line in the docs.
"""

from __future__ import annotations

import re
from pathlib import Path

from tpu_kernels.tokamax import FAMILIES
from tpu_kernels.tokamax.placements import ByName
from tpu_kernels.verification.checked_mode import Reference

ROOT = Path(__file__).resolve().parents[2]


def _ops():
    return [(family, op) for family in FAMILIES.values() for op in family.ops]


def test_every_op_declares_a_sharding_rule_bound_to_its_parameters():
    for family, op in _ops():
        rule = op.sharding
        assert isinstance(rule, ByName), (family.name, op.name, rule)
        positional = tuple(p.name for p in op.signature.params if not p.keyword_only)
        assert rule.params == positional and rule.n_outputs == len(op.output_names), op.name
        assert rule.description, op.name


def test_every_op_declares_a_check_reference_and_an_autocast_policy():
    for _, op in _ops():
        assert isinstance(op.check_reference, Reference) and not op.check_reference.jax, op.name
        assert op.autocast in ("keep", "lower_precision_fp", "fp32", "promote"), op.name


def test_one_rule_object_serves_one_op():
    rules = [op.sharding for _, op in _ops()]
    assert len({id(r) for r in rules}) == len(rules)


def test_models_parity_table_names_tests_that_exist():
    """The Tokamax column's DTensor and autocast cells in docs/models.md name real tests."""
    text = (ROOT / "docs" / "models.md").read_text()
    for row in ("| DTensor sharding |", "| autocast |"):
        line = next(line for line in text.splitlines() if line.startswith(row))
        tokamax_cell = line.split("|")[4]
        names = re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", tokamax_cell)
        assert names, line
        for path, test in names:
            assert f"def {test}(" in (ROOT / path).read_text(), (path, test)
