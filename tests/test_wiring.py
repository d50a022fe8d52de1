"""tpu_kernels/wiring.py: the package's late imports, discovered folders and hooks in one table
each, and no module of the package importing one of its own modules by name elsewhere."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from tpu_kernels import wiring

PACKAGE = Path(__file__).resolve().parent.parent / "tpu_kernels"
# Modules that import by name what the caller or another package names (wiring.py's docstring)
# and _compat.py, which resolves private APIs by name.
EXTERNAL = {
    "_compat.py",
    "wiring.py",
    "op.py",
    "commands/tune.py",
    "lowering_check/modules.py",
    "integrations/transformers/families.py",
    "tokamax/implementation.py",
}


def _by_name_imports(tree: ast.AST) -> list[int]:
    """Lines that call importlib.import_module, import_module or __import__."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name in ("import_module", "__import__"):
                lines.append(node.lineno)
    return lines


def test_no_module_but_the_wiring_imports_the_package_by_name():
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel in EXTERNAL:
            continue
        lines = _by_name_imports(ast.parse(path.read_text()))
        if lines:
            found[rel] = lines
    assert not found, f"imports by name outside tpu_kernels/wiring.py (route them through it): {found}"


def test_the_scan_finds_each_way_of_importing_by_name():
    tree = ast.parse("import importlib\nimportlib.import_module('x')\n__import__('y')\nfrom importlib import import_module\n"
                     "import_module('z')\n")
    assert _by_name_imports(tree) == [2, 3, 5]


def test_the_wiring_imports_nothing_of_the_package():
    tree = ast.parse((PACKAGE / "wiring.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert not (node.module or "").startswith("tpu_kernels"), node.module
        elif isinstance(node, ast.Import):
            assert not any(a.name.startswith("tpu_kernels") for a in node.names)


@pytest.mark.parametrize("module", sorted(wiring.LATE))
def test_every_late_module_loads_and_says_why(module):
    assert wiring.LATE[module].strip()
    if module == "tpu_kernels.runtime.sources.helion":
        pytest.importorskip("helion")
    assert wiring.load(module) is importlib.import_module(module)


def test_an_unlisted_module_or_hook_is_refused_naming_the_table():
    with pytest.raises(KeyError, match="not in LATE"):
        wiring.load("tpu_kernels.chip")
    with pytest.raises(KeyError, match="not in DISCOVERED"):
        wiring.discover("tpu_kernels.runtime", [])
    with pytest.raises(KeyError, match="no hook 'nope'"):
        wiring.install("nope", print)


@pytest.mark.parametrize("name", sorted(wiring.HOOKS))
def test_each_hook_is_installed_by_the_module_the_table_names(name):
    module, why = wiring.HOOKS[name]
    assert why.strip()
    fn = wiring.hook(name)
    assert callable(fn) and (fn.__module__ == module or fn.__module__.startswith(module + "."))


def test_the_discovered_families_are_the_registered_ones():
    from tpu_kernels.kernels import FAMILIES

    found = wiring.discover("tpu_kernels.kernels", importlib.import_module("tpu_kernels.kernels").__path__)
    assert sorted(m.__name__.rpartition(".")[2] for m in found) == sorted(FAMILIES)
