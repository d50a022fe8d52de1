"""Every registered Tokamax family has its test class, and each test class's settings name
what exists: a family added without `class Test<Family>(TokamaxFamilyTests)`, or a mark or
kept dtype that names no case (and so silently does nothing), fails here."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections import Counter

import tests.tokamax
from tests.tokamax.base import TokamaxFamilyTests
from tpu_kernels.tokamax import FAMILIES


def _test_classes() -> list[type[TokamaxFamilyTests]]:
    """The subclasses defined in the tests/tokamax test modules (imported here, so one not
    yet imported by this session counts too)."""
    found = []
    for info in pkgutil.iter_modules(tests.tokamax.__path__):
        if info.name.startswith("test_"):
            module = importlib.import_module(f"tests.tokamax.{info.name}")
            found += [
                cls
                for _, cls in inspect.getmembers(module, inspect.isclass)
                if issubclass(cls, TokamaxFamilyTests)
                and cls is not TokamaxFamilyTests
                and cls.__module__ == module.__name__
            ]
    return found


def test_every_registered_family_has_exactly_one_test_class_and_each_names_a_family():
    classes = _test_classes()
    counts = Counter(cls.family for cls in classes)
    missing = sorted(set(FAMILIES) - set(counts))
    assert not missing, f"no TokamaxFamilyTests subclass for the families {missing}"
    assert all(n == 1 for n in counts.values()), {f: n for f, n in counts.items() if n > 1}
    unknown = sorted(set(counts) - set(FAMILIES))
    assert not unknown, f"test classes name unregistered families {unknown}; registered: {sorted(FAMILIES)}"
    # pytest collects the base class's tests only through these: it must not be a Test* class
    assert not TokamaxFamilyTests.__name__.startswith("Test")
    assert all(cls.__name__.startswith("Test") for cls in classes)


def test_each_test_class_marks_and_keeps_only_what_exists():
    generic = {name for name in dir(TokamaxFamilyTests) if name.startswith("test_")}
    for cls in _test_classes():
        family = FAMILIES[cls.family]
        cases = set()
        for op in family.ops:
            cases.add(op.short_name)
            for i in range(len(getattr(family.examples, f"{op.short_name}_small")())):
                cases.add(f"{op.short_name}-{i}")
                cases.update(
                    f"{op.short_name}-{i}-{d}" for d in ("float32", "float64", "bfloat16", "as_given")
                )
        for test, by_case in cls.marks.items():
            assert test in generic, (cls.__name__, test, sorted(generic))
            assert set(by_case) <= cases, (cls.__name__, test, sorted(set(by_case) - cases))
        params = {p.name for op in family.ops for p in op.signature.params}
        assert cls.keep_dtype <= params, (cls.__name__, sorted(cls.keep_dtype - params))
