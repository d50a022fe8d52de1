"""The on-disk kernel cache: keys, loading without tracing, corruption, concurrency, the CLI.

Every test points TPU_KERNELS_CACHE_DIR at its own tmp_path (conftest.py gives the rest
of the session a private one): nothing here touches ~/.cache.
"""

import dataclasses
import importlib
import math
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from jax._src import config as jax_config
from jax.experimental import pallas as pl

from tpu_kernels import cli, disk_cache, fingerprint, tpu_kernel

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "kcache"
    monkeypatch.setenv("TPU_KERNELS_CACHE_DIR", str(d))
    return d


def _double_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0


def _double(x):
    # printed at trace time only: a test sees whether the kernel was traced
    print("tracing kcache double")
    return pl.pallas_call(_double_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


@tpu_kernel("kcache_test::double")
def double(x: torch.Tensor) -> torch.Tensor:
    return _double(x)


def _entries(d: Path) -> list[Path]:
    return sorted((d / "exports").glob("*.jaxexp"))


def _traced(capsys) -> int:
    return capsys.readouterr().out.count("tracing kcache double")


# ---- the digest -----------------------------------------------------------------------
def _define(src: str, **namespace):
    ns = dict(namespace)
    exec(textwrap.dedent(src), ns)
    return ns["f"]


BASE = """
def helper(x):
    return x * 2
def f(x, k=3):
    return helper(x) + k
"""


def test_the_digest_is_stable_and_changes_with_code_helpers_defaults_and_closures():
    d = fingerprint.digest
    assert d(_define(BASE)) == d(_define(BASE))  # two definitions of the same code
    assert d(_define(BASE)) != d(_define(BASE.replace("x * 2", "x * 3")))  # a helper's code
    assert d(_define(BASE)) != d(_define(BASE.replace("k=3", "k=4")))  # a default
    assert d(_define(BASE)) != d(_define(BASE.replace("+ k", "- k")))  # the body
    moved = "\n\n\n" + BASE  # line numbers are not part of it
    assert d(_define(BASE)) == d(_define(moved))
    closure = "def make(c):\n    def f(x):\n        return x * c\n    return f\nf = make(C)\n"
    assert d(_define(closure, C=2.0)) == d(_define(closure, C=2.0))
    assert d(_define(closure, C=2.0)) != d(_define(closure, C=2.5))
    table = "def f(x):\n    return x * TABLE[0]\n"  # a global constant, by value
    assert d(_define(table, TABLE=[1, 2])) != d(_define(table, TABLE=[5, 2]))


@dataclasses.dataclass(frozen=True)
class Blocks:  # a config object of one's own, holding code
    rows: int
    index: object


def test_dataclasses_are_digested_by_their_fields_and_opaque_library_objects_not_at_all():
    src = "def f(x):\n    return V\n"
    d = lambda v: fingerprint.digest(_define(src, V=v))  # noqa: E731
    assert d(Blocks(8, lambda i: (i, 0))) == d(Blocks(8, lambda i: (i, 0)))
    assert d(Blocks(8, lambda i: (i, 0))) != d(Blocks(8, lambda i: (i, 1)))
    assert d(Blocks(8, lambda i: (i, 0))) != d(Blocks(16, lambda i: (i, 0)))
    # library objects whose state neither a repr nor a field list shows: not digested
    assert d(pl.BlockSpec((8, 128), lambda i: (i, 0))) is None  # wraps its index_map
    assert d(np.random.default_rng(0)) is None
    assert d(torch.float32) is not None  # a dtype is its repr


def test_names_are_read_from_bytecode_and_local_imports_count(tmp_path, monkeypatch):
    class Opaque:
        pass

    # `math.pi` is an attribute: a global that is also named `pi` is not part of the kernel
    f = _define("def f(x):\n    return x * math.pi\n", math=math, pi=Opaque())
    assert fingerprint.digest(f) is not None
    g = _define("def f(x):\n    return x * scale\n", scale=Opaque())  # a global: it counts
    assert fingerprint.digest(g) is None
    # a module imported inside the function: digested when loaded, by its source file,
    # unless that file changed after this process started (it may not be what runs)
    module = tmp_path / "kcache_local_mod.py"
    module.write_text("def helper(x):\n    return x + 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    src = "def f(x):\n    from kcache_local_mod import helper\n    return helper(x)\n"
    assert fingerprint.digest(_define(src)) is None  # not loaded yet
    past = time.time() - 3600 * 24 * 365
    os.utime(module, (past, past))
    importlib.import_module("kcache_local_mod")
    try:
        assert fingerprint.digest(_define(src)) is not None
        later = tmp_path / "kcache_local_mod2.py"
        later.write_text("def helper(x):\n    return x + 2\n")
        importlib.import_module("kcache_local_mod2")
        os.utime(later, (time.time() + 5, time.time() + 5))  # "edited" after the import
        assert fingerprint.digest(_define(src.replace("mod import", "mod2 import"))) is None
    finally:
        sys.modules.pop("kcache_local_mod", None)
        sys.modules.pop("kcache_local_mod2", None)


def test_what_cannot_be_digested_gives_none():
    class Opaque:
        pass

    closure = "def make(c):\n    def f(x):\n        return x * c.scale\n    return f\nf = make(C)\n"
    f = _define(closure, C=Opaque())
    assert fingerprint.digest(f) is None
    assert "Opaque" in fingerprint.explain(f)


def test_the_shipped_kernels_can_be_digested():
    from tpu_kernels.kernels.elementwise import pallas as ep
    from tpu_kernels.kernels.matmul import pallas as mp
    from tpu_kernels.kernels.rmsnorm import pallas as rp
    from tpu_kernels.kernels.softmax import pallas as sp

    for fn in (sp.softmax, sp.softmax_backward, ep.scale_add, rp.rmsnorm, mp.matmul):
        assert fingerprint.explain(fn) is None, fn


def test_entry_keys_differ_by_precision_mode_shape_and_op():
    x = jax.ShapeDtypeStruct((8, 128), jnp.float32)
    base = (True, "highest", x.shape, torch.float32)
    key = lambda k, op="a::b": disk_cache.entry_key(_double, op, "cpu", k, False, True)  # noqa: E731
    assert key(base) is not None and key(base) == key(base)
    assert len({key(base), key((True, "high", *base[2:])), key((True, "highest", (8, 256), torch.float32)),
                key(base, "a::c"), key((True, "highest", x.shape, torch.bfloat16))}) == 5  # fmt: skip
    # the op's layout (from annotations, which are not code): results expected, parameters
    sig = double.signature
    with_layout = lambda n: disk_cache.entry_key(_double, "a::b", "cpu", base, False, True, (sig, n))  # noqa: E731
    assert with_layout(1) == with_layout(1) != with_layout(2)
    assert with_layout(1) != key(base)


# ---- loading without tracing ----------------------------------------------------------------
@pytest.mark.parametrize("route", ["eager", "dispatcher"])
def test_a_fresh_build_loads_the_kernel_from_disk_without_tracing(cache_dir, capsys, route):
    call = double if route == "eager" else double.overload  # the eager shortcut, or torch.ops
    x = torch.randn(16, 128)
    double.cache_clear()
    before = disk_cache.STATS.hits
    torch.testing.assert_close(call(x), x * 2)
    assert _traced(capsys) == 1
    assert len(_entries(cache_dir)) == 1
    double.cache_clear()  # as a new process would start: nothing compiled in memory
    out = call(x)
    torch.testing.assert_close(out, x * 2)
    assert _traced(capsys) == 0  # loaded: no tracing, no lowering
    assert disk_cache.STATS.hits == before + 1
    assert len(_entries(cache_dir)) == 1
    assert list((cache_dir / disk_cache.xla_subdir()).iterdir())  # JAX's compile cache, in our directory


@tpu_kernel("kcache_test::two")
def two(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    print("tracing kcache two")
    return x + 1, x * 2


@tpu_kernel("kcache_test::solve")
def solve(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    print("tracing kcache solve")
    return jnp.linalg.solve(a, b)  # LAPACK custom calls in the stored module


def test_tuples_float64_and_lapack_kernels_load_from_disk(cache_dir, capsys):
    x = torch.randn(8, 16, dtype=torch.float64)
    a = torch.randn(16, 16) + 16 * torch.eye(16)
    b = torch.randn(16, 4)
    for _ in range(2):  # built and stored, then loaded
        two.cache_clear()
        solve.cache_clear()
        hits = disk_cache.STATS.hits
        y1, y2 = two(x)
        assert y1.dtype == torch.float64  # 64-bit mode kept through the stored module
        torch.testing.assert_close((y1, y2), (x + 1, x * 2))
        torch.testing.assert_close(solve(a, b), torch.linalg.solve(a, b), rtol=1e-4, atol=1e-5)
    out = capsys.readouterr().out
    assert out.count("tracing kcache two") == 1 and out.count("tracing kcache solve") == 1
    assert disk_cache.STATS.hits == hits + 2


def test_jax_settings_are_scoped_and_a_users_cache_dir_is_left_alone(cache_dir, tmp_path):
    x = torch.randn(8, 128)
    double.cache_clear()
    double(x)
    assert jax_config.compilation_cache_dir.value is None  # not set for the user's jits
    assert jax_config.persistent_cache_min_compile_time_secs.value == 1.0
    users = tmp_path / "users-jax-cache"
    jax.config.update("jax_compilation_cache_dir", str(users))
    try:
        double.cache_clear()
        shutil_rm(cache_dir / disk_cache.xla_subdir())
        double(torch.randn(24, 128))  # a new shape: compiled now
        assert jax_config.compilation_cache_dir.value == str(users)
        assert not (cache_dir / disk_cache.xla_subdir()).exists()  # theirs is used, ours not created
    finally:
        jax.config.update("jax_compilation_cache_dir", None)


def shutil_rm(p: Path) -> None:
    import shutil

    shutil.rmtree(p, ignore_errors=True)


def test_off_writes_nothing(monkeypatch, tmp_path):
    monkeypatch.setenv("TPU_KERNELS_CACHE_DIR", "off")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert disk_cache.directory() is None
    double.cache_clear()
    x = torch.randn(8, 128)
    torch.testing.assert_close(double(x), x * 2)
    assert list(tmp_path.iterdir()) == []


def test_the_default_directory_is_the_users_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("TPU_KERNELS_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert disk_cache.directory() == tmp_path / "xdg" / "tpu-kernels" / "kernels"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert disk_cache.directory() == tmp_path / ".cache" / "tpu-kernels" / "kernels"


def test_an_op_that_cannot_be_digested_is_not_cached_on_disk(cache_dir):
    class Scale:  # an object the digest cannot read: the op must not be cached on disk
        def __init__(self, v):
            self.v = v

    s = Scale(3.0)

    @tpu_kernel("kcache_test::opaque")
    def opaque(x: torch.Tensor) -> torch.Tensor:
        return x * s.v

    before = disk_cache.STATS.uncacheable
    x = torch.randn(4, 4)
    torch.testing.assert_close(opaque(x), x * 3)
    assert disk_cache.STATS.uncacheable == before + 1
    assert _entries(cache_dir) == []


# ---- damaged entries ---------------------------------------------------------------------------
def _flip(p: Path, data: bytes, other: bytes) -> None:
    i = len(data) // 2
    p.write_bytes(data[:i] + bytes([data[i] ^ 0x40]) + data[i + 1 :])


def _flip_header(p: Path, data: bytes, other: bytes) -> None:
    p.write_bytes(data[:3] + b"X" + data[4:])


def _truncate(p: Path, data: bytes, other: bytes) -> None:
    p.write_bytes(data[: len(data) - 100])


def _empty(p: Path, data: bytes, other: bytes) -> None:
    p.write_bytes(b"")


def _foreign(p: Path, data: bytes, other: bytes) -> None:
    p.write_bytes(other)  # a valid entry, of another key


@pytest.mark.parametrize("damage", [_flip, _flip_header, _truncate, _empty, _foreign])
def test_a_damaged_entry_is_rejected_rebuilt_and_rewritten(cache_dir, capsys, damage):
    x, other_x = torch.randn(32, 128), torch.randn(40, 128)
    double.cache_clear()
    double(other_x)
    other = _entries(cache_dir)[0].read_bytes()
    double(x)
    (path,) = [p for p in _entries(cache_dir) if p.read_bytes() != other]
    good = path.read_bytes()
    damage(path, good, other)
    damaged = path.read_bytes()
    _traced(capsys)
    double.cache_clear()
    rejected = disk_cache.STATS.rejected
    torch.testing.assert_close(double(x), x * 2)  # never the damaged entry's result
    assert disk_cache.STATS.rejected == rejected + 1
    assert _traced(capsys) == 1  # rebuilt from the source
    assert path.read_bytes() != damaged  # and rewritten (exports are not byte-identical)
    double.cache_clear()
    torch.testing.assert_close(double(x), x * 2)
    assert _traced(capsys) == 0  # the rewritten entry loads


# ---- the command -----------------------------------------------------------------------------
def test_cache_info_and_clear(cache_dir, capsys):
    double.cache_clear()
    double(torch.randn(8, 128))
    double.cache_clear()
    double(torch.randn(8, 128))
    capsys.readouterr()
    assert cli.main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert str(cache_dir) in out
    assert "exports         1 entries" in out
    assert "kcache_test::double" in out and "hits 1" in out and "misses 1" in out
    assert cli.main(["cache", "clear", "--dir", str(cache_dir)]) == 0
    assert "removed" in capsys.readouterr().out
    assert _entries(cache_dir) == [] and not list((cache_dir / disk_cache.xla_subdir()).iterdir())
    assert cli.main(["cache", "info", "--json"]) == 0
    assert '"entries": 0' in capsys.readouterr().out


def test_cache_command_when_off(monkeypatch, capsys):
    monkeypatch.setenv("TPU_KERNELS_CACHE_DIR", "off")
    assert cli.main(["cache", "info"]) == 0
    assert "off" in capsys.readouterr().err
    assert cli.main(["cache", "clear"]) == 2  # nothing to clear: say so, not "removed 0"


# ---- processes -------------------------------------------------------------------------------
_SCRIPT = """
import sys, time
import jax
import torch
from jax.experimental import pallas as pl
from tpu_kernels import disk_cache, tpu_kernel


def _kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 3.0 + 1.0


@tpu_kernel("kcache_proc::affine")
def affine(x: torch.Tensor) -> torch.Tensor:
    print("tracing affine")
    return pl.pallas_call(_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


if len(sys.argv) > 1:  # a barrier: build only once both writers have imported everything
    import pathlib
    barrier = pathlib.Path(sys.argv[1])
    (barrier / str(__import__("os").getpid())).touch()
    deadline = time.time() + 120
    while len(list(barrier.iterdir())) < 2 and time.time() < deadline:
        time.sleep(0.005)
x = torch.arange(64 * 128, dtype=torch.float32).reshape(64, 128)
torch.testing.assert_close(affine(x), x * 3 + 1)
print("stats", disk_cache.STATS.hits, disk_cache.STATS.misses, disk_cache.STATS.rejected)
print("scipy.linalg imported:", "scipy.linalg" in sys.modules)
"""


@pytest.mark.slow  # three fresh processes: 50 s on the loaded 2-core machine, ~15 s idle
def test_two_processes_write_at_once_and_a_third_loads_without_tracing(cache_dir, tmp_path):
    script = tmp_path / "affine_kernel.py"
    script.write_text(_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TPU_KERNELS_CACHE_DIR": str(cache_dir)}
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    writers = [
        subprocess.Popen(
            [sys.executable, str(script), str(barrier)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for _ in range(2)
    ]
    outs = [w.communicate(timeout=240) for w in writers]
    for w, (out, err) in zip(writers, outs):
        assert w.returncode == 0, err
        assert "tracing affine" in out and "stats 0 1 0" in out
    assert len(_entries(cache_dir)) == 1
    assert not [p for p in (cache_dir / "exports").iterdir() if p.name.startswith(".tmp-")]
    reader = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=240
    )
    assert reader.returncode == 0, reader.stderr
    assert "tracing affine" not in reader.stdout  # a new process: no tracing, no lowering
    assert "stats 1 0 0" in reader.stdout
    # the LAPACK set-up (scipy.linalg, ~0.3-1 s) is skipped for a module that needs none
    assert "scipy.linalg imported: False" in reader.stdout


def test_importing_tokamax_leaves_the_disk_cache_on():
    """Tokamax's config options are JAX user contexts whose default is a bare object(): the
    trace settings read it as a sentinel, so importing Tokamax does not make every kernel
    uncacheable."""
    import tpu_kernels.tokamax  # noqa: F401 - creates Tokamax's user contexts

    assert disk_cache._trace_settings() is not None


def test_the_toolkit_digest_covers_the_package_source():
    """Edits to tpu_kernels itself invalidate every entry: the digest reads every module's
    source (code digests cannot walk module-level locks)."""
    digest = disk_cache._toolkit()
    assert len(digest) == 64 and int(digest, 16) >= 0
