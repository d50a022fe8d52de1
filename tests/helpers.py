"""Test helpers: the public ones in tpu_kernels.testing (generated kernel tests use them too),
and the loader of the repository's bench/ scripts (not a package: they run as scripts)."""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from tpu_kernels.testing import FLOAT_DTYPES, TOL, Tol, assert_close, compile_counted, rand

__all__ = ["FLOAT_DTYPES", "TOL", "Tol", "assert_close", "compile_counted", "load_bench_script", "rand"]

ROOT = Path(__file__).resolve().parents[1]


def load_bench_script(name: str) -> ModuleType:
    """bench/<name>.py imported as the module `bench_<name>`, without running its main().
    bench/ goes on sys.path (appended, as `tpu-kernels bench` does) for its shared _*.py helpers."""
    if str(ROOT / "bench") not in sys.path:
        sys.path.append(str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
