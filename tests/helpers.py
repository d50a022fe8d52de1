"""Test helpers: the public ones in tpu_kernels.testing (generated kernel tests use them too),
and the loader of the repository's bench/ scripts (not a package: they run as scripts)."""

import importlib.util
import itertools
import sys
from pathlib import Path
from types import ModuleType

from tpu_kernels.testing import FLOAT_DTYPES, TOL, Tol, assert_close, compile_counted, rand

__all__ = [
    "FLOAT_DTYPES",
    "TOL",
    "Tol",
    "assert_close",
    "compile_counted",
    "fresh_name",
    "load_bench_script",
    "rand",
    "uname",
]

ROOT = Path(__file__).resolve().parents[1]

_ids = itertools.count()  # one counter for the session: every name it gives is distinct


def fresh_name(base: str) -> str:
    """`base_N`, never given before in this process."""
    return f"{base}_{next(_ids)}"


def uname(base: str = "op") -> str:
    """A fresh op name, `<test module>::<base>_<N>`. Op names are process-global (torch.library
    keeps every registration), so each test defines its own; the namespace is the calling test
    module's name (tests/tokamax/test_wrap.py -> `test_wrap`), so an error naming the op says
    which file defined it."""
    module = sys._getframe(1).f_globals["__name__"].rsplit(".", 1)[-1]
    return f"{module}::{fresh_name(base)}"


def load_bench_script(name: str) -> ModuleType:
    """bench/<name>.py imported as the module `bench_<name>`, without running its main().
    bench/ goes on sys.path (appended, as `tpu-kernels bench` does) for its shared _*.py helpers."""
    if str(ROOT / "bench") not in sys.path:
        sys.path.append(str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
