"""The package's import direction: the TPU lowering check (`tpu_kernels/lowering_check/`), the test
helpers (`testing.py`), the commands, the benchmarks and the other layers above the core build
on it, and the core never imports any of them, not even inside a function (the tolerance
table and `Reference`, which tests and checked mode share, live in the core's `tolerance.py`).

Imports are read with ast, so function-level imports count as much as module-level ones.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import tpu_kernels

PACKAGE = Path(tpu_kernels.__file__).resolve().parent
# The layers above the core: they may import the check (and the core); the core may import none
# of them. `__main__.py` and `docs_tables.py` are entry points (`python -m ...`), never imported.
ABOVE_CORE = (
    "lowering_check",
    "mutate",  # renders templates and runs tests on scratch copies: a tool on the core
    "commands",
    "bench",
    "autotuner",  # finds tuned configs with the harness and the check; the core's tunables/ reads them
    "integrations",
    # the ops built on the core: the shipped kernel families and the Tokamax ops define ops with
    # @tpu_kernel and register themselves when imported; the core imports neither
    "kernels",
    "tokamax",
    "cli.py",
    "testing.py",
    "scaffold.py",
    "__main__.py",
    "docs_tables.py",
    "docs_perf.py",  # docs_tables' renderers of the measured figures (bench/reports/)
    # the package's facade: it names the public functions of every layer (`tpu_kernels.autotune`
    # is the autotuner's) and imports each on first use (PEP 562), so importing it loads no layer
    "__init__.py",
)


def _module(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[int, str, list[str]]]:
    """(line, absolute module, imported names) for every import in the file, at any depth."""
    tree = ast.parse(path.read_text(), str(path))
    package = _module(path) if path.name == "__init__.py" else _module(path).rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, module] if module else base)
            out.append((node.lineno, module, [a.name for a in node.names]))
    return out


def _core_files() -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py")) if p.relative_to(PACKAGE).parts[0] not in ABOVE_CORE]


def _check_files() -> list[Path]:
    return sorted((PACKAGE / "lowering_check").rglob("*.py"))


def _imports_check(module: str, names: list[str]) -> bool:
    return (
        module == "tpu_kernels.lowering_check"
        or module.startswith("tpu_kernels.lowering_check.")
        or (module == "tpu_kernels" and "lowering_check" in names)
    )


def test_the_core_never_imports_the_check():
    found = [
        f"{p.relative_to(PACKAGE)}:{line} imports {module}"
        for p in _core_files()
        for line, module, names in _imports(p)
        if _imports_check(module, names)
    ]
    assert not found, "the core imports the check:\n" + "\n".join(found)


def _imports_above_core(module: str, names: list[str]) -> str | None:
    """The layer above the core that this import reaches, or None."""
    for layer in ABOVE_CORE:
        name = "tpu_kernels." + layer.removesuffix(".py")
        if (
            module == name
            or module.startswith(name + ".")
            or (module == "tpu_kernels" and layer.removesuffix(".py") in names)
        ):
            return layer
    return None


def test_the_core_imports_no_layer_above_it():
    found = [
        f"{p.relative_to(PACKAGE)}:{line} imports {module} ({layer})"
        for p in _core_files()
        for line, module, names in _imports(p)
        if (layer := _imports_above_core(module, names))
    ]
    assert not found, "the core imports a layer above it:\n" + "\n".join(found)


def test_the_scan_sees_the_core_reaching_for_testing(tmp_path):
    """What the core once did for the tolerance table: caught, at module and function level."""
    pkg = tmp_path / "tpu_kernels"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    core = pkg / "checked_mode.py"
    core.write_text("from tpu_kernels.testing import TOL\ndef f():\n    from . import testing\n")
    global PACKAGE
    saved, PACKAGE = PACKAGE, pkg
    try:
        assert [_imports_above_core(m, n) for _, m, n in _imports(core)] == ["testing.py", "testing.py"]
        assert [p.name for p in _core_files()] == ["checked_mode.py"]  # the facade is not the core
    finally:
        PACKAGE = saved


def test_the_check_uses_the_cores_public_names_only():
    lazy = set(tpu_kernels._EXPORTS)
    found = []
    for p in _check_files():
        for line, module, names in _imports(p):
            if not module.startswith("tpu_kernels") or _imports_check(module, []):
                continue
            where = f"lowering_check/{p.relative_to(PACKAGE / 'lowering_check')}:{line}"
            if module == "tpu_kernels":
                # the package root's lazy names (PEP 562) hide which module they come from
                found += [f"{where} takes {n} from the package root" for n in names if n in lazy]
            # a private name of a core module, or a private core module (but _compat, shared by all)
            found += [f"{where} takes {module}.{n}" for n in names if n.startswith("_") and n != "_compat"]
            if any(part.startswith("_") and part != "_compat" for part in module.split(".")):
                found.append(f"{where} imports the private module {module}")
    assert not found, "\n".join(found)


def test_the_scan_sees_function_level_and_relative_imports(tmp_path):
    pkg = tmp_path / "tpu_kernels"
    (pkg / "lowering_check").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "lowering_check" / "__init__.py").write_text("")
    core = pkg / "core.py"
    core.write_text("def f():\n    from tpu_kernels.lowering_check import check_op\n    from .lowering_check import lowering\n")
    global PACKAGE
    saved, PACKAGE = PACKAGE, pkg
    try:
        assert [m for _, m, _ in _imports(core)] == ["tpu_kernels.lowering_check", "tpu_kernels.lowering_check"]
        assert all(_imports_check(m, n) for _, m, n in _imports(core))
    finally:
        PACKAGE = saved


def test_only_op_py_reads_a_kernel_ops_private_fields():
    import re

    from tpu_kernels.op import KernelOp

    # the instance fields KernelOp.__init__ sets with a leading underscore
    init = ast.parse((PACKAGE / "op.py").read_text())
    fields = {
        node.attr
        for node in ast.walk(init)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
        and isinstance(getattr(KernelOp, node.attr, None), (type(None),))
    }
    assert {"_backward", "_derived_fake", "_vmap_rule", "_vmap_twin", "_kernels"} <= fields
    pattern = re.compile(r"(?<!self)\.(" + "|".join(sorted(fields)) + r")\b")
    found = [
        f"{p.relative_to(PACKAGE)}:{i}: {line.strip()}"
        for p in sorted(PACKAGE.rglob("*.py"))
        if p.name != "op.py"
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert not found, "use KernelOp's public properties instead:\n" + "\n".join(found)


def test_the_check_has_one_name():
    """The check lives in `lowering_check/` only (issue 61: `check/` read as a near-synonym of
    `verification/`): no alias of its old package name, nor of the modules that moved from it
    into the core (its `chips.py`, now `tpu_kernels.lowering.target`, and `export.py`, now
    `tpu_kernels.lowering.export`)."""
    import sys

    import tpu_kernels.lowering_check

    # (a stale check/__pycache__/ left by the rename may remain in a checkout: no module in it)
    assert not list((PACKAGE / "check").rglob("*.py")) and not (PACKAGE / "check.py").exists()
    assert not any(m == "tpu_kernels.check" or m.startswith("tpu_kernels.check.") for m in sys.modules)
    assert not hasattr(tpu_kernels.lowering_check, "chips") and not hasattr(tpu_kernels.lowering_check, "export")


# The modules that carried "chip" in their names for other ideas (issue 61), by their new names.
RENAMED_FROM_CHIP = {
    "tunables/chip.py": "tunables/chip_name.py",  # the chip a call runs on, as tuning tables name it
    "lowering/chips.py": "lowering/target.py",  # the TPU generation a lowering targets, and its VMEM
    "lowering_check/chip_record.py": "lowering_check/corpus_verdicts.py",  # the check beside a TPU's verdicts
}


def test_the_chip_has_one_name():
    """The word "chip" names the chip runner (`tpu_kernels/chip/`) only (issue 61): the modules
    that named other ideas so have their own names, and no alias module keeps an old one importable."""
    import importlib.util

    assert (PACKAGE / "chip" / "__init__.py").is_file()
    for old, new in RENAMED_FROM_CHIP.items():
        assert (PACKAGE / new).is_file() and not (PACKAGE / old).exists(), (old, new)
        dotted = "tpu_kernels." + old.removesuffix(".py").replace("/", ".")
        assert importlib.util.find_spec(dotted) is None, f"{dotted} is still importable"


def test_the_harness_is_the_package_and_bench_holds_what_it_runs():
    """"bench" names one idea in two scopes, as pytest and a repository's tests/ do (issue 61):
    `tpu_kernels/bench/` is the harness, a library that runs only through `tpu-kernels bench`
    (no module of it is a script), and it discovers suites in a project's `bench/` folder; the
    repository's own `bench/` is that folder: suites, scripts and their records, not a package,
    and no module of tpu_kernels imports from it."""
    from tpu_kernels.bench import discover

    assert discover.DEFAULT_DIR == Path("bench")
    bench = PACKAGE.parent / "bench"
    assert (bench / "kernels.py").is_file() and not (bench / "__init__.py").exists()
    scripts = [p.name for p in (PACKAGE / "bench").glob("*.py") if "__main__" in p.read_text()]
    assert not scripts, scripts
    found = [f"{p.relative_to(PACKAGE)}:{line} imports {module}" for p in sorted(PACKAGE.rglob("*.py"))
             for line, module, _ in _imports(p) if module.split(".")[0] == "bench"]
    assert not found, found


# The optional libraries an integration wraps: only its own folder may import them.
INTEGRATED = ("transformers", "torchtitan")


def test_only_the_integrations_import_the_libraries_they_wrap():
    """`import tpu_kernels` never imports transformers or torchtitan: outside
    tpu_kernels/integrations/<library>/ no module imports the library, at any depth, and
    outside tpu_kernels/integrations/ none imports an integration."""
    found = []
    for p in sorted(PACKAGE.rglob("*.py")):
        parts = p.relative_to(PACKAGE).parts
        for line, module, _ in _imports(p):
            top = module.split(".")[0]
            if top in INTEGRATED and parts[:2] != ("integrations", top):
                found.append(f"{'/'.join(parts)}:{line} imports {module}")
            if module.startswith("tpu_kernels.integrations") and parts[0] != "integrations":
                found.append(f"{'/'.join(parts)}:{line} imports {module}")
    assert not found, "\n".join(found)
    assert all((PACKAGE / "integrations" / name).is_dir() for name in INTEGRATED)


# ---- the core without a circle: features see an op through a protocol, only op.py assembles ----

# The module that assembles an op from its spec and registers every feature for it. No other
# module of the core imports it (not even for a type: features annotate with protocol.Op).
ASSEMBLY = "op.py"


def _imports_op(module: str, names: list[str]) -> bool:
    return module == "tpu_kernels.op" or (
        module == "tpu_kernels" and bool({"op", "KernelOp", "tpu_kernel"} & set(names))
    )


def test_no_module_of_the_core_but_the_assembly_imports_op_py():
    found = [
        f"{p.relative_to(PACKAGE)}:{line} imports {module} {names}"
        for p in _core_files()
        if p.relative_to(PACKAGE).as_posix() != ASSEMBLY
        for line, module, names in _imports(p)
        if _imports_op(module, names)
    ]
    assert not found, "a feature imports op.py (use tpu_kernels.definition.protocol.Op):\n" + "\n".join(found)


def _module_graph(package: Path) -> dict[str, set[str]]:
    """Every module of the package -> the package's modules it imports, at any depth (the
    facade `tpu_kernels/__init__.py` excluded: it imports on first use, by name)."""
    files = {_module(p): p for p in package.rglob("*.py")}

    def resolve(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for m, p in files.items():
        out = set()
        if m != package.name:
            for _, module, names in _imports(p):
                if not module.startswith(package.name):
                    continue
                for n in names or [""]:
                    target = resolve(f"{module}.{n}" if f"{module}.{n}" in files else module)
                    if target and target != m:
                        out.add(target)
        graph[m] = out
    return graph


def import_cycles(package: Path = PACKAGE) -> list[list[str]]:
    """The package's import circles: its strongly connected components of more than one module."""
    graph = _module_graph(package)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_package_has_no_import_circle():
    assert not import_cycles(), "import circles (each a set of modules importing each other):\n" + "\n".join(
        map(str, import_cycles())
    )


def test_the_layer_tests_fail_on_a_feature_importing_op_py_and_on_a_circle(tmp_path):
    pkg = tmp_path / "tpu_kernels"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for sub in ("dispatch", "definition"):
        (pkg / sub).mkdir()
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "op.py").write_text("from tpu_kernels.dispatch import autograd\nclass KernelOp: ...\n")
    (pkg / "dispatch" / "autograd.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tpu_kernels.op import KernelOp\n"
    )
    global PACKAGE
    saved, PACKAGE = PACKAGE, pkg
    try:
        with pytest.raises(AssertionError, match=r"dispatch/autograd.py:3 imports tpu_kernels.op"):
            test_no_module_of_the_core_but_the_assembly_imports_op_py()
        assert import_cycles(pkg) == [["tpu_kernels.dispatch.autograd", "tpu_kernels.op"]]
        (pkg / "dispatch" / "autograd.py").write_text("from tpu_kernels.definition.protocol import Op\n")
        (pkg / "definition" / "protocol.py").write_text("class Op: ...\n")
        test_no_module_of_the_core_but_the_assembly_imports_op_py()
        assert import_cycles(pkg) == []
    finally:
        PACKAGE = saved


# The core's folders, bottom to top: each imports only the folders before it (and the core's
# base modules at the top level: errors, _compat, _scoped, startup, cpu_client). spec.py and op.py, above
# them all, assemble an op from every folder's parts.
CORE_ORDER = ("definition", "lowering", "runtime", "verification", "dispatch", ("sharding", "tunables"))


def _rank(module: str) -> int | None:
    """The place in CORE_ORDER of the core folder `module` lies in, or None."""
    parts = module.split(".")
    if parts[0] != "tpu_kernels" or len(parts) < 2:
        return None
    for i, layer in enumerate(CORE_ORDER):
        if parts[1] in (layer if isinstance(layer, tuple) else (layer,)):
            return i
    return None


def test_the_cores_folders_import_only_the_folders_below_them():
    found = []
    for p in _core_files():
        here = _rank(_module(p))
        if here is None:
            continue
        for line, module, names in _imports(p):
            targets = [f"{module}.{n}" for n in names] if module == "tpu_kernels" else [module]
            for target in targets:
                there = _rank(target)
                if there is not None and there > here:
                    found.append(f"{p.relative_to(PACKAGE)}:{line} imports {target}")
                if target in ("tpu_kernels.op", "tpu_kernels.spec"):
                    found.append(f"{p.relative_to(PACKAGE)}:{line} imports {target} (the assembly)")
    assert not found, f"an import runs up the core's folders {CORE_ORDER}:\n" + "\n".join(found)


def test_the_folder_order_test_fails_on_an_upward_import(tmp_path):
    pkg = tmp_path / "tpu_kernels"
    for sub in ("", "runtime", "dispatch"):
        (pkg / sub).mkdir(exist_ok=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "dispatch" / "eager.py").write_text("from tpu_kernels.runtime import bridge\n")
    (pkg / "runtime" / "bridge.py").write_text("def f():\n    from tpu_kernels.dispatch.eager import g\n")
    global PACKAGE
    saved, PACKAGE = PACKAGE, pkg
    try:
        with pytest.raises(AssertionError, match=r"runtime/bridge.py:2 imports tpu_kernels.dispatch.eager"):
            test_the_cores_folders_import_only_the_folders_below_them()
        (pkg / "runtime" / "bridge.py").write_text("")
        test_the_cores_folders_import_only_the_folders_below_them()
    finally:
        PACKAGE = saved
