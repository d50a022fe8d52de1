"""tpu_kernels' C++ parts: built on this machine for the torch in use, loaded when built.

One extension today, `eager_checks` (eager_checks.cpp): the eager shortcut's per-call checks
(dispatch/eager.py), which in Python cost more than the CPU kernel of a small op
(bench/overhead.py; docs/performance.md, "Per-op overhead"). Every native function has a
Python twin that gives the same answers (tests/test_native.py runs both on the same inputs);
a process without the build runs the twin.

    python -m tpu_kernels.runtime.native build     # compile (scripts/env.sh does; needs a C++ compiler)
    python -m tpu_kernels.runtime.native status    # built? loaded? where?

A build is compiled with torch.utils.cpp_extension into
`$XDG_CACHE_HOME/tpu-kernels/native/<tag>/` (default ~/.cache), `TPU_KERNELS_NATIVE_DIR` moves
it. The tag hashes the source, torch's version and build, and Python's version: an upgrade of
either, or an edited source, finds no build and runs the Python twin until built again. A
shared library runs as code in the process, so a build is loaded only from a folder and
file of this user that others cannot write (or `TPU_KERNELS_CACHE_TRUST=shared`, as for the
kernel cache: docs/caching.md). `TPU_KERNELS_NATIVE=off` never loads one.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import platform
import stat
import sys
import warnings
from pathlib import Path
from types import ModuleType

import torch

from tpu_kernels.runtime.cache import store

ENV = "TPU_KERNELS_NATIVE"
DIR_ENV = "TPU_KERNELS_NATIVE_DIR"
EXTENSIONS = ("eager_checks",)
_OFF = ("off", "0", "false", "no")
_SOURCE_DIR = Path(__file__).resolve().parent


def enabled() -> bool:
    """False when `TPU_KERNELS_NATIVE` says off (off, 0, false, no)."""
    return os.environ.get(ENV, "").strip().lower() not in _OFF


def root() -> Path:
    value = os.environ.get(DIR_ENV)
    if value:
        return Path(value).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tpu-kernels" / "native"


def source(name: str) -> Path:
    if name not in EXTENSIONS:
        raise ValueError(
            f"tpu_kernels.runtime.native: no extension {name!r}; there are {', '.join(EXTENSIONS)}"
        )
    return _SOURCE_DIR / f"{name}.cpp"


def tag(name: str) -> str:
    """What a build of `name` must match: its source, torch's version and build, Python's."""
    parts = [
        source(name).read_bytes(),
        torch.__version__.encode(),
        str(torch.version.git_version).encode(),
        str(torch.compiled_with_cxx11_abi()).encode(),
        sys.version.encode(),
        platform.machine().encode(),
    ]
    return hashlib.sha256(b"\0".join(parts)).hexdigest()[:16]


def module_name(name: str) -> str:
    return f"tpu_kernels_{name}"


def build_dir(name: str) -> Path:
    return root() / f"{name}-{tag(name)}"


def library(name: str) -> Path:
    return build_dir(name) / f"{module_name(name)}.so"


def untrusted(path: Path) -> str | None:
    """Why the library at `path` (or its folder) must not be loaded, or None."""
    for p in (path.parent, path):
        st = os.lstat(p)
        if stat.S_ISLNK(st.st_mode):
            return f"{p} is a symbolic link"
        problem = store.owner_problem(p, st)
        if problem:
            return problem
    return None


def build(name: str) -> Path:
    """Compile `name` for this torch and Python (a no-op when built); the library's path.
    Raises the compiler's error (a missing compiler, a header torch no longer has)."""
    from torch.utils import cpp_extension

    path = library(name)
    if path.is_file() and module(name) is not None:
        return path  # built for this source, torch and Python, and it loads
    if path.is_file():
        path.unlink()  # damaged: build it anew (ninja would call it up to date)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path.parent, 0o700)
    cpp_extension.load(
        name=module_name(name),
        sources=[str(source(name))],
        build_directory=str(path.parent),
        extra_cflags=["-O2"],
        verbose=False,
    )
    if not path.is_file():
        raise RuntimeError(f"tpu_kernels.runtime.native: building {name} left no {path}")
    module.cache_clear()
    return path


@functools.cache
def module(name: str) -> ModuleType | None:
    """The built extension `name`, loaded, or None: not built for this torch and Python,
    turned off (`TPU_KERNELS_NATIVE=off`), or not safe to load (warns once, with why)."""
    if not enabled():
        return None
    path = library(name)
    if not path.is_file():
        return None
    problem = untrusted(path)
    if problem is not None:
        warnings.warn(
            f"tpu_kernels: not loading the native extension {path}: {problem}. A shared library "
            f"runs as code in this process; make the folder yours and not writable by others, "
            f"or set {store.TRUST_ENV}=shared. The Python checks run instead (same results, slower).",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    existing = sys.modules.get(module_name(name))
    if existing is not None and getattr(existing, "__file__", None) == str(path):
        return existing  # built (and so loaded) in this process
    try:
        spec = importlib.util.spec_from_file_location(module_name(name), path)
        loaded = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        spec.loader.exec_module(loaded)  # type: ignore[union-attr]
    except (ImportError, OSError) as e:  # a damaged or half-written build
        warnings.warn(
            f"tpu_kernels: the native extension {path} does not load ({e}); build it again with "
            f"`python -m tpu_kernels.runtime.native build`. The Python checks run instead (same results, slower).",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    sys.modules[module_name(name)] = loaded
    return loaded


def status() -> dict[str, dict[str, object]]:
    """Per extension: its library's path, whether it is built, loadable and turned on."""
    out = {}
    for name in EXTENSIONS:
        path = library(name)
        built = path.is_file()
        out[name] = {
            "library": str(path),
            "built": built,
            "enabled": enabled(),
            "untrusted": untrusted(path) if built else None,
        }
    return out


__all__ = ["DIR_ENV", "ENV", "EXTENSIONS", "build", "enabled", "library", "module", "status", "tag"]
