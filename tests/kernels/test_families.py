"""Every registered kernel family has its test class: one `KernelFamilyTests` subclass in
tests/kernels, so a family registered without its tests fails here, not silently."""

from __future__ import annotations

import importlib
import pkgutil

import tests.kernels
from tests.kernels.base import KernelFamilyTests
from tests.registries import kernel_families


def _test_classes() -> dict[str, list[str]]:
    """family name -> the KernelFamilyTests subclasses of tests/kernels/test_*.py naming it."""
    for info in pkgutil.iter_modules(tests.kernels.__path__):
        if info.name.startswith("test_"):
            importlib.import_module(f"tests.kernels.{info.name}")
    found: dict[str, list[str]] = {}
    for cls in KernelFamilyTests.__subclasses__():
        if cls.__module__.startswith("tests.kernels.test_"):
            found.setdefault(cls.family, []).append(f"{cls.__module__}.{cls.__qualname__}")
    return found


def test_every_registered_family_has_exactly_one_test_class():
    found = _test_classes()
    missing = [f.name for f in kernel_families() if f.name not in found]
    assert not missing, f"kernel families without a KernelFamilyTests subclass in tests/kernels: {missing}"
    doubled = {name: classes for name, classes in found.items() if len(classes) > 1}
    assert not doubled, f"families with more than one test class: {doubled}"


def test_every_test_class_names_a_registered_family():
    registered = {f.name for f in kernel_families()}
    unknown = {name: classes for name, classes in _test_classes().items() if name not in registered}
    assert not unknown, f"test classes naming no registered kernel family: {unknown}"


def test_a_test_class_gets_every_base_test_for_its_family():
    """The base class's tests are collected per subclass: each has them all (pytest collects
    the subclass's inherited test_* methods; the base itself has no Test prefix)."""
    base_tests = {n for n in vars(KernelFamilyTests) if n.startswith("test_")}
    assert len(base_tests) >= 10
    for classes in _test_classes().values():
        for path in classes:
            module, _, name = path.rpartition(".")
            cls = getattr(importlib.import_module(module), name)
            assert name.startswith("Test") and base_tests <= set(dir(cls)), path
