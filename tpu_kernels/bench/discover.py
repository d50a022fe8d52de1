"""Finding benchmark suites: Python files that define `benchmarks(quick, device)`.

tpu-kernels bench                 every suite in ./bench/
tpu-kernels bench softmax         ./bench/softmax.py
tpu-kernels bench path/to/x.py    that file
tpu-kernels bench path/to/dir     every suite in that directory
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from tpu_kernels.bench.spec import Benchmark

DEFAULT_DIR = Path("bench")


def suite_files(target: str | None, root: Path | None = None) -> list[Path]:
    base = (root or Path.cwd()) / DEFAULT_DIR
    if target is None:
        if not base.is_dir():
            raise FileNotFoundError(
                f"tpu-kernels bench: no suite directory {base}; run from the repository root or pass a path."
            )
        return _suites_in(base)
    path = Path(target)
    if path.is_dir():
        return _suites_in(path)
    if path.suffix == ".py" and path.exists():
        return [path]
    candidate = base / f"{target}.py"
    if candidate.exists():
        return [candidate]
    known = ", ".join(p.stem for p in _suites_in(base)) if base.is_dir() else "none"
    raise FileNotFoundError(f"tpu-kernels bench: no suite {target!r} (known suites: {known}).")


def _suites_in(directory: Path) -> list[Path]:
    return sorted(
        p for p in directory.glob("*.py") if not p.name.startswith("_") and "def benchmarks(" in p.read_text()
    )


def load(path: Path, *, quick: bool, device_type: str) -> list[Benchmark]:
    name = f"tpu_kernels_bench_suite_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load benchmark suite {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    if str(path.parent) not in sys.path:  # suites import their shared helpers (bench/_common.py);
        sys.path.append(str(path.parent))  # appended, so a suite named like a package cannot shadow it
    spec.loader.exec_module(module)
    if not hasattr(module, "benchmarks"):
        raise AttributeError(
            f"{path}: a suite defines benchmarks(quick: bool, device_type: str) -> list[Benchmark]"
        )
    return list(module.benchmarks(quick=quick, device_type=device_type))
