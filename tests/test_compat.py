"""tpu_kernels/_compat.py: every private API in one place, each live on the pinned versions."""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import logging
import sys
from pathlib import Path

import pytest

from tests.helpers import HAS_TOKAMAX, NO_TOKAMAX
from tpu_kernels import _compat
from tpu_kernels.dispatch import autograd
from tpu_kernels.runtime import bridge

PACKAGE = Path(__file__).resolve().parent.parent / "tpu_kernels"
# The packages whose private names count: a module or attribute starting with "_".
THIRD_PARTY = {"torch", "jax", "jaxlib", "tokamax", "helion", "torch_tpu", "triton"}


@pytest.mark.parametrize("name", sorted(_compat.entries()))
def test_every_fast_path_is_live_on_the_pinned_versions(name):
    # a failure here means a pinned package moved a private API: update its path in
    # _compat.py (the fallback or error is what users on that release get)
    path = _compat.entries()[name].path
    if path.startswith("torch.distributed") and not _distributed():
        pytest.skip("this torch build has no torch.distributed")
    if path.startswith("tokamax") and not HAS_TOKAMAX:
        pytest.skip(NO_TOKAMAX)
    assert _compat.live()[name], f"{path} did not resolve"
    value = _compat.get(name)
    assert value is not _compat.entries()[name].fallback


def _distributed() -> bool:
    import torch.distributed

    return torch.distributed.is_available()


def test_the_features_built_on_them_take_their_fast_paths():
    assert bridge.LOW_LEVEL
    assert autograd._FAST_PATH_LIVE


def test_names_read_by_string_exist():
    if HAS_TOKAMAX:
        importlib.import_module(_compat.TOKAMAX_OPS + "normalization.api")
    assert _compat.JAX_CALLBACK_LOGGER in logging.Logger.manager.loggerDict or importlib.import_module(
        _compat.JAX_CALLBACK_LOGGER
    )
    # torch_tpu is not installed here; its module path is checked where it is (a TPU machine)
    if importlib.util.find_spec("torch_tpu") is not None:  # pragma: no cover - TPU machines
        importlib.import_module(_compat.TORCH_TPU_PRECISION_MODULE)


def test_a_moved_api_gets_its_fallback(monkeypatch):
    entry = _compat.entries()["torch_function_mode_enabled"]
    monkeypatch.setitem(
        _compat._ENTRIES, "torch_function_mode_enabled", entry._replace(path="torch._C:_gone")
    )
    monkeypatch.setattr(_compat, "_resolved", {})
    assert not _compat.live()["torch_function_mode_enabled"]
    assert _compat.get("torch_function_mode_enabled")() is True  # "a mode may be active": the slow, safe path
    assert not _compat.all_of("torch_function_mode_enabled")


def test_an_older_releases_place_is_tried_after_the_newest(monkeypatch):
    entry = _compat.entries()["torch_tracing"]
    moved = entry._replace(path="torch._no_such_module:tracing", older=("torch._gone:x", entry.path))
    monkeypatch.setitem(_compat._ENTRIES, "torch_tracing", moved)
    monkeypatch.setattr(_compat, "_resolved", {})
    assert _compat.live()["torch_tracing"]
    assert _compat.get("torch_tracing") is _compat._resolve(entry.path)


def test_a_moved_api_without_fallback_raises_naming_it(monkeypatch):
    entry = _compat.entries()["torch_tracing"]
    monkeypatch.setitem(
        _compat._ENTRIES, "torch_tracing", entry._replace(path="torch._no_such_module:tracing")
    )
    monkeypatch.setattr(_compat, "_resolved", {})
    with pytest.raises(_compat.CompatError, match=r"torch\._no_such_module\.tracing .*leaving torch.compile"):
        _compat.get("torch_tracing")
    assert not _compat.all_of("torch_tracing")


def test_the_never_equal_state_differs_from_itself():
    s = _compat._NeverEqual()
    assert s.raw_repr() != s.raw_repr()


# namedtuple's public API, underscored so as not to clash with field names
_PUBLIC_UNDERSCORED = {"_fields", "_asdict", "_replace", "_make", "_field_defaults"}
# the prefix of the attributes tpu_kernels sets on others' objects (a patched HF class's family)
OURS_ON_OTHERS = "_tpu_kernels"


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in _PUBLIC_UNDERSCORED


def _defined_names(paths) -> frozenset[str]:
    """The private names the project defines, which it may read on any object: a module's
    top-level names (assigned, def, class, imported as), a class body's (fields, methods,
    nested classes), and attributes assigned on `self`/`cls` (also through `setattr` or
    `object.__setattr__` with the name's string). Function locals are not among them: a
    local `_config` must not excuse a third party's `obj._config`."""
    names: set[str] = set()

    def targets(node: ast.AST) -> list[ast.AST]:
        if isinstance(node, ast.Assign):
            return node.targets
        if isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            return [node.target]
        return []

    def body_names(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update(a.asname for a in node.names if a.asname)
            for t in targets(node):
                names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
            if isinstance(node, (ast.If, ast.Try)):  # `if TYPE_CHECKING:`, `try: import ...`
                body_names(node.body + node.orelse + getattr(node, "finalbody", []))
                for h in getattr(node, "handlers", []):
                    body_names(h.body)

    def on_self(node: ast.AST) -> bool:
        return isinstance(node, ast.Name) and node.id in ("self", "cls")

    for path in paths:
        tree = ast.parse(path.read_text(), str(path))
        body_names(tree.body)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                body_names(node.body)
            for t in targets(node):
                names.update(n.attr for n in ast.walk(t) if isinstance(n, ast.Attribute) and on_self(n.value))
            if isinstance(node, ast.Call) and len(node.args) > 1 and on_self(node.args[0]):
                func = node.func
                fname = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                text = node.args[1]
                if fname in ("setattr", "__setattr__") and isinstance(text, ast.Constant):
                    names.add(text.value)
    return frozenset(n for n in names if isinstance(n, str) and _is_private(n))


def _annotations(tree: ast.AST) -> set[int]:
    """The ids of the nodes inside annotations: never evaluated (every module has `from
    __future__ import annotations`), so a type like `argparse._SubParsersAction` is not a use."""
    roots: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.annotation is not None:
            roots.append(node.annotation)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
            roots.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            roots.append(node.annotation)
    return {id(n) for root in roots for n in ast.walk(root)}


def _private_uses(path: Path, ours: frozenset[str] | None = None) -> list[str]:
    """Private names outside _compat.py that are not the project's own.

    A name is private when it starts with "_" and is neither a dunder nor namedtuple's
    underscored API (`_replace`, ...). The rule, for every module but _compat.py:

    - a THIRD_PARTY package's private module or name is never used: imports of one;
      attribute chains through the package, an alias of one of its modules (`import
      jax.numpy as jnp`, `from jax import lax`) or a variable holding one (`m =
      torch._dynamo`); `importlib.import_module` of a private module's name; private keyword
      arguments (`DeviceMesh(..., _rank=0)`);
    - a private attribute of any other object (`lib._destroy()`, `self.lib._destroy()`,
      `type(x)._owner`, `argparse._HelpAction`), read, written or named in a
      `getattr`/`hasattr`/`setattr` string, is a use unless the project defines that name
      (`ours`, by default `_defined_names` of the package: a module's or class's own names,
      attributes it assigns on `self`/`cls`) or it starts with `_tpu_kernels` (what the project
      sets on others' objects). A statically unknown object may be anyone's: the name decides;
      a third party's private attribute that happens to share a name the project defines is
      missed;
    - annotations are not uses (never evaluated).
    """
    ours = _PROJECT_NAMES() if ours is None else ours
    tree = ast.parse(path.read_text(), str(path))
    typed = _annotations(tree)
    found = []

    def theirs(name: str) -> bool:
        return _is_private(name) and name not in ours and not name.startswith(OURS_ON_OTHERS)

    def private(dotted: str) -> bool:
        parts = dotted.split(".")
        return parts[0] in THIRD_PARTY and any(_is_private(p) for p in parts[1:])

    def dotted(node: ast.AST) -> str | None:
        chain = []
        while isinstance(node, ast.Attribute):
            chain.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        root = modules.get(node.id, node.id)
        return ".".join([root, *reversed(chain)])

    modules: dict[str, str] = {}  # local name -> the third-party module path it holds
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname and a.name.split(".")[0] in THIRD_PARTY:
                    modules[a.asname] = a.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] in THIRD_PARTY:
                for a in node.names:
                    modules[a.asname or a.name] = f"{node.module}.{a.name}"
    for node in ast.walk(tree):  # a module held in a variable: m = torch._dynamo
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = dotted(node.value) if isinstance(node.value, (ast.Attribute, ast.Name)) else None
            if value is not None and value.split(".")[0] in THIRD_PARTY:
                modules.setdefault(node.targets[0].id, value)

    for node in ast.walk(tree):
        if id(node) in typed:
            continue
        if isinstance(node, ast.Import):
            found += [f"{path.name}:{node.lineno} import {a.name}" for a in node.names if private(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" for a in node.names]
            if private(node.module) or any(private(n) for n in names):
                found.append(f"{path.name}:{node.lineno} from {node.module} import ...")
        elif isinstance(node, ast.Attribute):
            full = dotted(node)
            if full is not None and private(full):
                found.append(f"{path.name}:{node.lineno} {full}")
            elif theirs(node.attr):
                found.append(f"{path.name}:{node.lineno} {ast.unparse(node)}")
        elif isinstance(node, ast.Call):
            func = node.func
            fname = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            text = node.args[1] if fname in ("getattr", "hasattr", "setattr") and len(node.args) > 1 else None
            if isinstance(text, ast.Constant) and isinstance(text.value, str) and theirs(text.value):
                found.append(f"{path.name}:{node.lineno} {fname}(..., {text.value!r})")
            module = node.args[0] if fname == "import_module" and node.args else None
            if isinstance(module, ast.Constant) and isinstance(module.value, str) and private(module.value):
                found.append(f"{path.name}:{node.lineno} import_module({module.value!r})")
            found += [
                f"{path.name}:{node.lineno} keyword {k.arg}="
                for k in node.keywords
                if k.arg and _is_private(k.arg)
            ]
    # one report per line (an attribute chain's inner links are the same use)
    by_line: dict[str, str] = {}
    for u in found:
        by_line.setdefault(u.split(" ", 1)[0], u)
    return list(by_line.values())


@functools.cache
def _PROJECT_NAMES() -> frozenset[str]:  # noqa: N802 - a constant, computed once
    return _defined_names(sorted(PACKAGE.rglob("*.py")))


def test_no_module_but_compat_uses_private_apis():
    uses = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name != "_compat.py":
            uses += _private_uses(path)
    assert not uses, "private APIs outside tpu_kernels/_compat.py:\n" + "\n".join(uses)


def test_the_scan_finds_each_kind_of_private_use(tmp_path):
    f = tmp_path / "m.py"
    f.write_text(
        "import torch._dynamo.testing\n"
        "from jax._src import config\n"
        "from torch.autograd.function import _SingleLevelFunction\n"
        "x = torch._C._to_dlpack\n"
        "v = torch.__version__\n"
        "from tpu_kernels.tokamax._examples import S\n"
        "import jax.numpy as jnp\n"
        "y = jnp._src\n"
        "m = torch._dynamo\n"
        "z = m.config\n"
        "k = getattr(obj, '_key_fn', None)\n"
        "importlib.import_module('jax._src.pallas')\n"
        "DeviceMesh('cpu', r, _rank=0)\n"
        "ok = getattr(obj, '__name__', None), getattr(obj, '_tpu_kernels_activation', None)\n"
        # private attributes of objects that are not modules: anyone's unless the module defines them
        "lib._destroy()\n"  # 15
        "class Op:\n"
        "    _table = {}\n"
        "    def __init__(self, lib):\n"
        "        self.lib = lib\n"
        "        self._cache = {}\n"
        "    def _build(self, p: argparse._SubParsersAction) -> _Result:\n"  # annotations: not uses
        "        self.lib._destroy()\n"  # 22
        "        return self._cache, self._table, other._cache, self._build\n"
        "    def close(self):\n"
        "        self._inherited_from_torch()\n"  # 25: self, but nothing here defines it
        "obj._private()\n"  # 26
        "type(new)._owner.__name__\n"  # 27
        "isinstance(a, argparse._HelpAction)\n"  # 28
        "module._tpu_kernels_buckets = 1\n"
        "hasattr(self, '_cache'), getattr(bound, '_config')\n"  # 30: '_config' is not ours
        "bound._config = 1\n"  # 31: writing a private attribute is a use too
    )
    found = sorted((u.split(" ", 1)[0] for u in _private_uses(f, ours=_defined_names([f]))), key=_line)
    assert found == [
        "m.py:1",
        "m.py:2",
        "m.py:3",
        "m.py:4",
        "m.py:8",
        "m.py:9",
        "m.py:10",
        "m.py:11",
        "m.py:12",
        "m.py:13",
        "m.py:15",
        "m.py:22",
        "m.py:25",
        "m.py:26",
        "m.py:27",
        "m.py:28",
        "m.py:30",
        "m.py:31",
    ]
    assert _defined_names([f]) == {"_table", "_cache", "_build"}


def _line(where: str) -> int:
    return int(where.split(":")[1])


def test_compat_imports_nothing_heavy():
    code = (
        "import sys; import tpu_kernels._compat; "
        "print(sorted(m for m in ('torch', 'jax', 'helion', 'tokamax') if m in sys.modules))"
    )
    import subprocess

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    # tpu_kernels/__init__ imports torch and jax itself; _compat adds neither Helion nor Tokamax
    assert "helion" not in out.stdout and "tokamax" not in out.stdout


def test_symbolic_dimension_internals_are_live():
    import jax

    a, b = jax.export.symbolic_shape("a, b")
    d = 3 * a * b + a
    terms = _compat.symbolic_terms(d)
    assert sorted(coeff for _, coeff in terms) == [1, 3]
    factors = [sorted((f.var, e) for f, e in _compat.term_factors(t)) for t, _ in terms]
    assert sorted(factors) == [[("a", 1)], [("a", 1), ("b", 1)]]


def test_a_moved_attribute_raises_naming_it():
    with pytest.raises(_compat.CompatError, match=r"builtins\.int\._sorted_terms \(the terms"):
        _compat.symbolic_terms(3)


def test_helion_settings_copy_uses_copy_and_falls_back_to_replace():
    import dataclasses

    import helion

    settings = helion.Settings(backend="pallas")
    copied = _compat.helion_settings_copy(settings, backend="triton")
    assert copied.backend == "triton" and settings.backend == "pallas"
    assert type(copied) is type(settings)

    @dataclasses.dataclass
    class OldSettings:  # helion 1.4's Settings: a dataclass with no copy()
        backend: str = "pallas"
        static_shapes: bool = True

    old = OldSettings()
    new = _compat.helion_settings_copy(old, backend="triton")
    assert new == OldSettings("triton", True) and old.backend == "pallas" and new is not old
    assert _compat.helion_settings_copy(old) == old and _compat.helion_settings_copy(old) is not old


# ---- the private attributes of objects, moved here from op.py, precision.py, sources/helion.py
# and docs_tables.py: each live on the pinned versions, each with its fallback or its error


def test_a_library_fragment_is_released_at_once_and_without_destroy_later():
    import torch

    lib = torch.library.Library("test_compat_destroy", "FRAGMENT")
    lib.define("twice(Tensor x) -> Tensor")
    _compat.destroy_library(lib)  # the name is free again: a new definition is accepted
    again = torch.library.Library("test_compat_destroy", "FRAGMENT")
    again.define("twice(Tensor x) -> Tensor")
    _compat.destroy_library(again)

    class Moved:  # a release without _destroy: left to torch's finalizer
        pass

    _compat.destroy_library(Moved())


def test_torch_tpus_precision_is_read_only_once_imported_and_a_moved_one_is_named(monkeypatch):
    import types

    monkeypatch.delitem(sys.modules, _compat.TORCH_TPU_PRECISION_MODULE, raising=False)
    assert _compat.torch_tpu_precision() is None  # never imported on its behalf
    impl = types.ModuleType(_compat.TORCH_TPU_PRECISION_MODULE)
    impl._get_precision = lambda: "HIGH"
    impl._get_global_precision = lambda: "DEFAULT"
    monkeypatch.setitem(sys.modules, _compat.TORCH_TPU_PRECISION_MODULE, impl)
    assert _compat.torch_tpu_precision() == ("HIGH", "DEFAULT")
    del impl._get_global_precision
    with pytest.raises(
        _compat.CompatError, match=r"precision_impl\._get_precision and _get_global_precision"
    ):
        _compat.torch_tpu_precision()


def test_the_config_of_a_bound_helion_kernel_is_live_and_a_moved_one_is_named():
    import torch

    from tpu_kernels.kernels import helion_ops

    kernel = helion_ops.add_helion.source.interpret
    x = torch.randn(8, 128)
    kernel(x, x, 1.0)  # about 2 s: Helion's Pallas interpreter
    assert _compat.helion_bound_config(kernel.bind((x, x, 1.0))).block_sizes == kernel.configs[0].block_sizes
    with pytest.raises(_compat.CompatError, match=r"builtins\.object\._config \(the config Helion chose"):
        _compat.helion_bound_config(object())


def test_a_parsers_arguments_come_without_help():
    import argparse

    p = argparse.ArgumentParser()
    p.add_argument("modules", nargs="*")
    p.add_argument("--races", action="store_true")
    assert [a.dest for a in _compat.parser_actions(p)] == ["modules", "races"]
    with pytest.raises(_compat.CompatError, match=r"builtins\.object\._actions"):
        _compat.parser_actions(object())


def test_assume_constant_result_sets_what_torchs_decorator_sets_without_importing_dynamo():
    import subprocess
    import sys

    import torch

    def ours():
        return 1

    def theirs():
        return 1

    _compat.assume_constant_result(ours)
    torch.compiler.assume_constant_result(theirs)
    assert {k: v for k, v in vars(ours).items()} == {k: v for k, v in vars(theirs).items()} != {}
    # and importing the op (which decorates the tuning lookups) loads neither Dynamo nor DTensor
    code = (
        "import sys; import tpu_kernels.op; "
        "print(sorted(m for m in ('torch._dynamo', 'torch.distributed.tensor') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout


def test_helion_tiles_reads_only_the_grid_tiles():
    """A matmul's K is an inner loop's tile (its partial last block is masked, so K=384 with
    256-wide blocks runs and is right): only M and N are grid tiles a call must fill."""
    import helion
    import torch

    from tpu_kernels.kernels.helion_ops import matmul_helion

    a, b = torch.randn(64, 384), torch.randn(384, 192)
    kernel = matmul_helion.source.kernel
    first = kernel.configs[0].block_sizes  # under its first config, or the one given
    assert _compat.helion_tiles(kernel, (a, b)) == [(64, first[0]), (192, first[1])]
    assert _compat.helion_tiles(kernel, (a, b), helion.Config(block_sizes=[128, 64, 256])) == [(64, 128), (192, 64)]
