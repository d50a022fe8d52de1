"""tpu_kernels/_compat.py: every private API in one place, each live on the pinned versions."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import logging
import sys
from pathlib import Path

import pytest

from tpu_kernels import _compat, autograd, bridge

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


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in _PUBLIC_UNDERSCORED


def _private_uses(path: Path) -> list[str]:
    """Private names of a THIRD_PARTY package reached outside _compat.py: imports of a private
    module or name; attribute reads through the package, an alias of one of its modules
    (`import jax.numpy as jnp`, `from jax import lax`) or a local variable holding one
    (`m = torch._dynamo`); `getattr`/`hasattr`/`setattr` with a private name's string (on any
    object: a third-party object's private attribute, e.g. a Helion kernel's `_key_fn`);
    `importlib.import_module` of a private module's name; and private keyword arguments
    (`DeviceMesh(..., _rank=0)`)."""
    tree = ast.parse(path.read_text(), str(path))
    found = []

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
        elif isinstance(node, ast.Call):
            func = node.func
            fname = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            text = node.args[1] if fname in ("getattr", "hasattr", "setattr") and len(node.args) > 1 else None
            if isinstance(text, ast.Constant) and isinstance(text.value, str) and _is_private(text.value):
                found.append(f"{path.name}:{node.lineno} {fname}(..., {text.value!r})")
            module = node.args[0] if fname == "import_module" and node.args else None
            if isinstance(module, ast.Constant) and isinstance(module.value, str) and private(module.value):
                found.append(f"{path.name}:{node.lineno} import_module({module.value!r})")
            found += [
                f"{path.name}:{node.lineno} keyword {k.arg}="
                for k in node.keywords
                if k.arg and _is_private(k.arg)
            ]
    # one report per line (an attribute chain's inner links are the same use); our own
    # attributes on others' objects (`_tpu_kernels_...`) are ours
    by_line: dict[str, str] = {}
    for u in found:
        if "'_tpu_kernels" not in u:
            by_line.setdefault(u.split(" ", 1)[0], u)
    return list(by_line.values())


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
    )
    found = [u.split(" ", 1)[0] for u in _private_uses(f)]
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
    ]


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
