"""Each shipped family's first docstring line writes its op's call: its parameters, and their
defaults as the signature has them (issue 61: three said block_rows=256 or blocks of 256 after
the defaults had become None, sized to the chip)."""

from __future__ import annotations

import ast
import importlib
import inspect
import re

import pytest

from tpu_kernels.kernels import registry

FAMILIES = sorted(registry.FAMILIES)
REQUIRED = "(no default)"


def _written_call(family: registry.Family) -> str:
    doc = importlib.import_module(family.package).__doc__ or ""
    head = " ".join(doc.split("\n\n")[0].split())  # the first paragraph, unwrapped
    found = re.search(rf"torch\.ops\.tpu_kernels\.{family.op.short_name}\((.*?)\)", head)
    assert found, f"{family.package}: the docstring's first paragraph writes no torch.ops.tpu_kernels call"
    return found.group(1)


@pytest.mark.parametrize("name", FAMILIES)
def test_the_first_docstring_line_writes_the_ops_signature(name):
    family = registry.FAMILIES[name]
    written = []
    for part in (p.strip() for p in _written_call(family).split(",")):
        name, eq, value = part.partition("=")
        written.append((name, ast.literal_eval(value) if eq else REQUIRED))
    want = []
    for i, p in enumerate(family.op.signature.params):
        if p.keyword_only and (i == 0 or not family.op.signature.params[i - 1].keyword_only):
            want.append(("*", REQUIRED))
        want.append((p.name, REQUIRED if p.default is inspect.Parameter.empty else p.default))
    assert written == want, (family.package, written, want)
