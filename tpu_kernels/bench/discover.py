"""Finding benchmark suites: Python files that define `benchmarks(quick, device)`.

tpu-kernels bench                  every suite in ./bench/ if it has any, else the shipped suites
tpu-kernels bench kernels          ./bench/kernels.py, else the shipped suite of that name
tpu-kernels bench path/to/x.py     that file
tpu-kernels bench path/to/dir      every suite in that directory
tpu-kernels bench --suites DIR     every suite in DIR (a name then means DIR/NAME.py)

The shipped suites are the checkout's `bench/` folder (a source checkout, also an
editable install) or the copy a wheel carries as `tpu_kernels/_suites`, so the
benchmark runs from any directory; the report goes under the current one.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from tpu_kernels.bench.spec import Benchmark

DEFAULT_DIR = Path("bench")


class SuiteNotFound(FileNotFoundError):
    """No suite where one was asked for: a user error, reported as one line."""


def shipped_dir() -> Path | None:
    """The suites that come with tpu_kernels: the checkout's bench/ or the wheel's copy."""
    package = Path(__file__).resolve().parents[1]
    for candidate in (package.parent / "bench", package / "_suites"):
        if (candidate / "_common.py").is_file() and _suites_in(candidate):
            return candidate
    return None


def default_dir(root: Path | None = None) -> Path | None:
    """./bench when it holds suites (a project of the user's), else the shipped suites."""
    local = (root or Path.cwd()) / DEFAULT_DIR
    if local.is_dir() and _suites_in(local):
        return local
    return shipped_dir()


def suite_files(target: str | None, root: Path | None = None, suites: Path | None = None) -> list[Path]:
    if suites is not None and not suites.is_dir():
        raise SuiteNotFound(f"tpu-kernels bench: --suites {suites}: no such directory.")
    base = suites if suites is not None else default_dir(root)
    if target is None:
        found = _suites_in(base) if base is not None else []
        if not found:
            where = base or (root or Path.cwd()) / DEFAULT_DIR
            raise SuiteNotFound(
                f"tpu-kernels bench: no suites in {where} (a suite is a .py file defining "
                "benchmarks(quick, device_type)); pass a suite file or directory, or --suites DIR."
            )
        return found
    path = Path(target)
    if path.is_dir():
        found = _suites_in(path)
        if not found:
            raise SuiteNotFound(f"tpu-kernels bench: no suites in directory {path}.")
        return found
    if path.suffix == ".py":
        if path.exists():
            return [path]
        raise SuiteNotFound(f"tpu-kernels bench: no suite file {path}.")
    bases = [base] if suites is not None else [base, shipped_dir()]
    for b in bases:
        if b is not None and (b / f"{target}.py").exists():
            return [b / f"{target}.py"]
    known = sorted({p.stem for b in bases if b is not None for p in _suites_in(b)})
    raise SuiteNotFound(
        f"tpu-kernels bench: no suite {target!r} (known suites: {', '.join(known) or 'none'})."
    )


def _suites_in(directory: Path) -> list[Path]:
    return sorted(
        p for p in directory.glob("*.py") if not p.name.startswith("_") and "def benchmarks(" in p.read_text()
    )


def load(path: Path, *, quick: bool, device_type: str) -> list[Benchmark]:
    """The benchmarks of the suite at `path` (imported first: `import_suite`)."""
    return suite_benchmarks(import_suite(path), quick=quick, device_type=device_type)


def import_suite(path: Path) -> ModuleType:
    """The suite module at `path`, imported once per process while its file is unchanged (its
    module name is fixed; a file edited since is run again). A
    suite that imports a device's module registers that device (tpu_kernels.runtime.devices), so the
    command imports every suite before it resolves --device."""
    name = f"tpu_kernels_bench_suite_{path.stem}"
    source = path.read_text()
    loaded = sys.modules.get(name)
    if (
        loaded is not None
        and Path(loaded.__file__ or "").resolve() == path.resolve()
        and getattr(loaded, "_tpu_kernels_suite_source", None) == source
    ):
        return loaded  # unchanged: run again, it would register its ops a second time
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load benchmark suite {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    if str(path.parent) not in sys.path:  # suites import their shared helpers (bench/_common.py);
        sys.path.append(str(path.parent))  # appended, so a suite named like a package cannot shadow it
    spec.loader.exec_module(module)
    module._tpu_kernels_suite_source = source  # type: ignore[attr-defined]  # what it ran
    if not hasattr(module, "benchmarks"):
        raise AttributeError(
            f"{path}: a suite defines benchmarks(quick: bool, device_type: str) -> list[Benchmark]"
        )
    return module


def suite_benchmarks(module: ModuleType, *, quick: bool, device_type: str) -> list[Benchmark]:
    """What an imported suite's `benchmarks(quick, device_type)` returns, as a list."""
    return list(module.benchmarks(quick=quick, device_type=device_type))
