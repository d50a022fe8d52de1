"""Test helpers: the public ones in tpu_kernels.testing (generated kernel tests use them too),
and the loader of the repository's bench/ scripts (not a package: they run as scripts)."""

import importlib.util
import os
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from tpu_kernels.testing import FLOAT_DTYPES, TOL, Tol, assert_close, compile_counted, rand

__all__ = [
    "FLOAT_DTYPES",
    "TOL",
    "Tol",
    "assert_close",
    "compile_counted",
    "free_port",
    "load_bench_script",
    "rand",
    "spawn_ranks",
]

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
