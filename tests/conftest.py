"""Test session setup: JAX on its CPU backend, a private kernel cache, fresh random seeds that can be replayed."""

import atexit
import os
import shutil
import tempfile

# libtpu (a dependency of torch-tpu) makes JAX probe for a TPU at start-up: seconds
# of failed initialisation on a CPU machine. The tests run JAX on the CPU, except on a
# machine with a TPU device, where the TPU suite (tests/tpu) needs JAX and torch_tpu on it.
import glob  # noqa: E402

if not any(glob.glob(p) for p in ("/dev/accel*", "/dev/vfio/[0-9]*")):
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Helion must never autotune implicitly in a test: a kernel without a config that
# would autotune raises instead (tests that autotune on purpose lift this).
os.environ.setdefault("HELION_DISALLOW_AUTOTUNING", "1")
# XLA's CPU compile time dominates this suite; its LLVM optimisation level does not
# change what the kernels compute (every result is still checked against a float64
# reference), and level 0 made compiles 2-3x faster here.
os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0")
# The on-disk kernel cache stays on (the default users get, so every kernel the suite
# builds also goes through it), but in a directory of this session's own, never the
# user's ~/.cache: tests start cold and leave nothing behind. Tests of the cache itself
# point it at their own tmp_path. TPU_KERNELS_CACHE_DIR=off runs the suite without it.
if os.environ.get("TPU_KERNELS_CACHE_DIR", "").lower() != "off":
    _CACHE_DIR = tempfile.mkdtemp(prefix="tpu-kernels-test-cache-")
    os.environ["TPU_KERNELS_CACHE_DIR"] = _CACHE_DIR
    atexit.register(shutil.rmtree, _CACHE_DIR, ignore_errors=True)

# Tuning tables: the session reads and writes its own directory, never one a developer's
# runs filled (tests of tuning point it at their own tmp_path). Tables beside the shipped
# kernels would still be read: none are committed.
os.environ["TPU_KERNELS_TUNING_DIR"] = tempfile.mkdtemp(prefix="tpu-kernels-test-tuning-")
atexit.register(shutil.rmtree, os.environ["TPU_KERNELS_TUNING_DIR"], ignore_errors=True)

# Inductor's caches (FX graph, AOTAutograd) key a compiled graph on the forward graph, not
# on an op's Python backward: after a change to how tpu_kernels builds backward ops, a warm
# cache replayed a backward call in the old calling convention (seen here: matmul_backward
# given a list after its schema became flat). One Inductor cache per version of the package's
# source keeps the suite's warm-cache speed without ever replaying another version's graphs
# (docs/torch-compile.md tells users the same).
if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
    import hashlib
    from pathlib import Path

    _digest = hashlib.sha256()
    for _path in sorted((Path(__file__).resolve().parents[1] / "tpu_kernels").rglob("*.py")):
        _digest.update(_path.read_bytes())
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(
        tempfile.gettempdir(), f"torchinductor-tpu-kernels-{_digest.hexdigest()[:16]}"
    )

import random  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from tpu_kernels import cpu_client  # noqa: E402

# JAX's CPU client runs each computation in the calling thread, as tpu_kernels makes it when
# it is first to use JAX: tests that make JAX arrays before any op call would otherwise give
# the session a client that dispatches to worker threads (and the note that says so).
cpu_client.synchronous()

_SEED_ENV = "TPU_KERNELS_TEST_SEED"


@pytest.fixture(autouse=True)
def fresh_seed(request: pytest.FixtureRequest) -> int:
    """Each test draws fresh random inputs; a failure reports the seed to replay it with
    TPU_KERNELS_TEST_SEED=<seed>."""
    seed = int(os.environ.get(_SEED_ENV) or random.SystemRandom().randrange(2**31))
    torch.manual_seed(seed)
    request.node.user_properties.append(("seed", seed))
    return seed


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        seeds = [v for k, v in item.user_properties if k == "seed"]
        if seeds:
            report.sections.append(("seed", f"replay with {_SEED_ENV}={seeds[0]}"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist (`-n 2`) timing tests share 2 cores with another worker and measure it,
    not the code: they are left out there, and scripts/test runs them alone first."""
    if os.environ.get("PYTEST_XDIST_WORKER") or getattr(config.option, "numprocesses", None):
        serial = [item for item in items if item.get_closest_marker("serial")]
        if serial:
            config.hook.pytest_deselected(items=serial)
            items[:] = [item for item in items if not item.get_closest_marker("serial")]
