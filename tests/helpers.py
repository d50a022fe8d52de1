"""Test helpers: the public ones in tpu_kernels.testing (generated kernel tests use them too),
and the loader of the repository's bench/ scripts (not a package: they run as scripts)."""

import functools
import importlib.util
import itertools
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from tpu_kernels.testing import FLOAT_DTYPES, TOL, Tol, assert_close, compile_counted, rand

__all__ = [
    "FLOAT_DTYPES",
    "TOL",
    "Tol",
    "assert_close",
    "compile_counted",
    "HAS_TOKAMAX",
    "NO_TOKAMAX",
    "free_port",
    "fresh_name",
    "load_bench_script",
    "needs_tokamax",
    "process_time_limit_s",
    "rand",
    "spawn_ranks",
    "spawn_startup_s",
    "uname",
]

ROOT = Path(__file__).resolve().parents[1]

# Tokamax (tpu_kernels.tokamax) needs Python >= 3.12: the Python 3.11 environment
# (requirements/lock-py311.txt, scripts/test-py311) runs without it, and these tests skip there.
HAS_TOKAMAX = importlib.util.find_spec("tokamax") is not None
NO_TOKAMAX = "needs tokamax, which is not installed (it needs Python >= 3.12)"
needs_tokamax = pytest.mark.skipif(not HAS_TOKAMAX, reason=NO_TOKAMAX)

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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn_ranks(worker: Callable, world: int, *args, timeout_s: float) -> None:
    """worker(rank, world, port, *args) in `world` fresh interpreters (torch.multiprocessing,
    spawn) on a free port; fails the test, killing them, past `timeout_s`. The workers are
    fresh interpreters: torch must not auto-load torch_tpu in them (seconds of start-up and
    libtpu errors on a machine without a TPU) before they import torch."""
    import pytest
    import torch.multiprocessing as mp

    saved = os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD")
    os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    try:
        ctx = mp.start_processes(
            worker, args=(world, free_port(), *args), nprocs=world, join=False, start_method="spawn"
        )
    finally:
        if saved is None:
            os.environ.pop("TORCH_DEVICE_BACKEND_AUTOLOAD")
        else:
            os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = saved
    deadline = time.monotonic() + timeout_s
    while not ctx.join(timeout=1):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            pytest.fail(f"the {world}-process run did not finish in {timeout_s} s")


# A spawned worker's first job, and what a loaded machine slows like everything else it does.
_STARTUP = "import torch, jax, tpu_kernels.kernels"
LIMIT_CAP_S = 1200.0  # the longest any multi-process test may wait, however loaded the machine


@functools.cache
def spawn_startup_s() -> float:
    """Seconds a fresh interpreter takes now to import torch, JAX and the shipped kernels (what
    every spawned worker does first), measured once per session: the yardstick time limits of
    multi-process tests are given in, so they grow with the machine's load."""
    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    t0 = time.monotonic()
    try:
        subprocess.run(
            [sys.executable, "-c", _STARTUP], env=env, check=True, capture_output=True, timeout=LIMIT_CAP_S
        )
    except subprocess.TimeoutExpired:
        return LIMIT_CAP_S
    return time.monotonic() - t0


def process_time_limit_s(startups: float, floor_s: float = 60.0, cap_s: float = LIMIT_CAP_S) -> float:
    """A time limit for a multi-process run worth `startups` process start-ups (its duration
    divided by `spawn_startup_s()`, both measured in one session, times the headroom wanted),
    at least `floor_s` and at most `cap_s`: a loaded machine gets proportionally longer, and a
    hang on a quiet machine still fails within a minute or two."""
    return min(cap_s, max(floor_s, startups * spawn_startup_s()))


def hypothesis_settings(examples: int, random_examples: int) -> object:
    """Hypothesis settings as the property tests use them: the same `examples` every run
    (derandomized), or `random_examples` fresh ones with TPU_KERNELS_HYPOTHESIS_RANDOM=1; a
    failure prints its reproduction blob; no deadline (builds and threads vary in time)."""
    from hypothesis import HealthCheck, settings

    fresh = os.environ.get("TPU_KERNELS_HYPOTHESIS_RANDOM") == "1"
    return settings(
        max_examples=random_examples if fresh else examples,
        derandomize=not fresh,
        print_blob=True,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
