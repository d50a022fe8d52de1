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


def _private_uses(path: Path) -> list[str]:
    """Imports of a private module and reads of a private attribute of a THIRD_PARTY package."""
    tree = ast.parse(path.read_text(), str(path))
    found = []

    def private(dotted: str) -> bool:
        parts = dotted.split(".")
        return parts[0] in THIRD_PARTY and any(
            p.startswith("_") and not p.startswith("__") for p in parts[1:]
        )

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"{path.name}:{node.lineno} import {a.name}" for a in node.names if private(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" for a in node.names]
            if private(node.module) or any(private(n) for n in names):
                found.append(f"{path.name}:{node.lineno} from {node.module} import ...")
        elif isinstance(node, ast.Attribute):
            chain, cur = [node.attr], node.value
            while isinstance(cur, ast.Attribute):
                chain.append(cur.attr)
                cur = cur.value
            if isinstance(cur, ast.Name) and private(".".join([cur.id, *reversed(chain)])):
                found.append(f"{path.name}:{node.lineno} {cur.id}.{chain[-1]}...")
    return list(dict.fromkeys(found))  # an attribute chain's inner links are reported once


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
    )
    assert [u.split(" ", 1)[0] for u in _private_uses(f)] == ["m.py:1", "m.py:2", "m.py:3", "m.py:4"]


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
