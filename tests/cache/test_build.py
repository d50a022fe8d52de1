"""The on-disk cache end to end: loading without lowering, what is refused, the trust model.

Every test points TPU_KERNELS_CACHE_DIR at its own tmp_path (conftest.py gives the rest
of the session a private one): nothing here touches ~/.cache.
"""

import contextlib
import os
import stat
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from jax.experimental import pallas as pl
from jax.experimental import serialize_executable

from tests.helpers import needs_tokamax
from tpu_kernels import cli, tpu_kernel
from tpu_kernels.runtime import cache
from tpu_kernels.runtime.cache import build, entry, store

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "kcache"
    monkeypatch.setenv("TPU_KERNELS_CACHE_DIR", str(d))
    monkeypatch.delenv("TPU_KERNELS_CACHE_TRUST", raising=False)
    return d


def _double_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0


@tpu_kernel("kcache_test::double")
def double(x: torch.Tensor) -> torch.Tensor:
    return pl.pallas_call(_double_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


@tpu_kernel("kcache_test::scaled")
def scaled(x: torch.Tensor, *, alpha: float = 1.0) -> torch.Tensor:
    return x * alpha


def _entries(d: Path) -> list[Path]:
    return sorted((d / "executables").glob("*/*.tkexe"))


@contextlib.contextmanager
def _lowerings():
    """How many times JAX lowered and compiled inside (JAX's own duration events)."""
    counts = {"lower": 0, "compile": 0}
    names = {
        "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
        "/jax/core/compile/backend_compile_duration": "compile",
    }

    def listen(event, duration, **kwargs):
        if event in names:
            counts[names[event]] += 1

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        yield counts
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)


# ---- loading --------------------------------------------------------------------------------
@pytest.mark.parametrize("route", ["eager", "dispatcher"])
def test_a_fresh_build_loads_the_executable_without_lowering_or_compiling(cache_dir, route):
    call = double if route == "eager" else double.overload  # the eager shortcut, or torch.ops
    x = torch.randn(16, 128)
    double.cache_clear()
    hits = cache.STATS.hits
    with _lowerings() as first:
        torch.testing.assert_close(call(x), x * 2)
    assert first == {"lower": 1, "compile": 1}
    assert len(_entries(cache_dir)) == 1
    double.cache_clear()  # as a new process would start: nothing compiled in memory
    with _lowerings() as second:
        torch.testing.assert_close(call(x), x * 2)
    assert second == {"lower": 0, "compile": 0}  # traced only
    assert cache.STATS.hits == hits + 1
    assert len(_entries(cache_dir)) == 1


@tpu_kernel("kcache_test::two")
def two(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x + 1, x * 2


@tpu_kernel("kcache_test::solve")
def solve(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return jnp.linalg.solve(a, b)  # LAPACK custom calls in the stored executable


def test_tuples_float64_and_lapack_kernels_load_from_disk(cache_dir):
    x = torch.randn(8, 16, dtype=torch.float64)
    a = torch.randn(16, 16) + 16 * torch.eye(16)
    b = torch.randn(16, 4)
    for _ in range(2):  # built and stored, then loaded
        two.cache_clear()
        solve.cache_clear()
        hits = cache.STATS.hits
        y1, y2 = two(x)
        assert y1.dtype == torch.float64  # 64-bit mode kept through the stored executable
        torch.testing.assert_close((y1, y2), (x + 1, x * 2))
        torch.testing.assert_close(solve(a, b), torch.linalg.solve(a, b), rtol=1e-4, atol=1e-5)
    assert cache.STATS.hits == hits + 2


def test_statics_and_shapes_are_their_own_entries(cache_dir):
    x = torch.randn(8, 4)
    scaled.cache_clear()
    for alpha in (1.0, 2.0):
        torch.testing.assert_close(scaled(x, alpha=alpha), x * alpha)
    scaled(torch.randn(16, 4), alpha=2.0)
    assert len(_entries(cache_dir)) == 3


def test_a_jax_cache_dir_of_the_users_is_left_alone(cache_dir):
    from jax._src import config as jax_config

    double.cache_clear()
    double(torch.randn(8, 128))
    assert jax_config.compilation_cache_dir.value is None  # tpu_kernels never sets JAX's cache
    assert sorted(p.name for p in cache_dir.iterdir()) == ["executables", "stats.log"]


def test_off_writes_nothing(monkeypatch, tmp_path):
    monkeypatch.setenv("TPU_KERNELS_CACHE_DIR", "off")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert cache.directory() is None
    double.cache_clear()
    x = torch.randn(8, 128)
    torch.testing.assert_close(double(x), x * 2)
    assert list(tmp_path.iterdir()) == []


def test_the_default_directory_is_the_users_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("TPU_KERNELS_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.directory() == tmp_path / "xdg" / "tpu-kernels" / "kernels"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache.directory() == tmp_path / ".cache" / "tpu-kernels" / "kernels"


def test_a_program_with_a_host_callback_is_not_stored(cache_dir):
    @tpu_kernel("kcache_test::callback")
    def callback(x: torch.Tensor) -> torch.Tensor:
        return jax.pure_callback(lambda a: np.asarray(a) * 3, jax.ShapeDtypeStruct(x.shape, x.dtype), x)

    before = cache.STATS.uncacheable
    x = torch.randn(4, 4)
    torch.testing.assert_close(callback(x), x * 3)
    assert cache.STATS.uncacheable == before + 1
    assert _entries(cache_dir) == []


def test_a_constant_is_stored_by_value_or_not_at_all(cache_dir):
    tables = {"t": np.arange(8, dtype=np.float32)}

    @tpu_kernel("kcache_test::table")
    def table(x: torch.Tensor) -> torch.Tensor:
        return x + jnp.asarray(tables["t"])  # a dict mutated at run time: the trace reads it

    x = torch.randn(2, 8)
    for t in (np.arange(8, dtype=np.float32), np.arange(8, dtype=np.float32) * 10):
        tables["t"] = t
        table.cache_clear()
        torch.testing.assert_close(table(x), x + torch.from_numpy(t))
        table.cache_clear()  # again: from disk if stored, never the other table's entry
        torch.testing.assert_close(table(x), x + torch.from_numpy(t))


def test_kernels_that_differ_only_in_what_they_return_never_share_an_entry(cache_dir):
    """Two kernels compute x * 2 and x * 3 alike and return one each: the key walks the
    program's outputs, so the second neither loads the first's executable (2.0 for 3.0)
    nor overwrites it."""

    @tpu_kernel("kcache_test::returns_first")
    def returns_first(x: torch.Tensor) -> torch.Tensor:
        both = (x * 2.0, x * 3.0)
        return both[0]

    @tpu_kernel("kcache_test::returns_second")
    def returns_second(x: torch.Tensor) -> torch.Tensor:
        both = (x * 2.0, x * 3.0)
        return both[1]

    x = torch.randn(4, 8)
    torch.testing.assert_close(returns_first(x), x * 2.0)
    hits = cache.STATS.hits
    torch.testing.assert_close(returns_second(x), x * 3.0)
    assert cache.STATS.hits == hits and len(_entries(cache_dir)) == 2


# ---- entries that must never run ----------------------------------------------------------
def _two_entries(cache_dir):
    """The entries of scaled(alpha=2) and scaled(alpha=3) on one input, built now."""
    x = torch.randn(4, 8)
    paths = []
    for alpha in (2.0, 3.0):
        scaled.cache_clear()
        before = set(_entries(cache_dir))
        scaled(x, alpha=alpha)
        (new,) = set(_entries(cache_dir)) - before
        paths.append(new)
    return x, paths


def _rerun(x, rejected_more: int) -> None:
    rejected = cache.STATS.rejected
    for alpha in (2.0, 3.0):
        scaled.cache_clear()
        torch.testing.assert_close(scaled(x, alpha=alpha), x * alpha)  # never the other's
    assert cache.STATS.rejected == rejected + rejected_more


def test_swapped_entries_are_rejected_rebuilt_and_replaced(cache_dir):
    x, (p2, p3) = _two_entries(cache_dir)
    a, b = p2.read_bytes(), p3.read_bytes()
    p2.write_bytes(b)
    p3.write_bytes(a)
    _rerun(x, rejected_more=2)
    hits = cache.STATS.hits
    _rerun(x, rejected_more=0)  # replaced: they load now
    assert cache.STATS.hits == hits + 2


def test_an_entry_copied_over_another_is_rejected(cache_dir):
    x, (p2, p3) = _two_entries(cache_dir)
    p2.write_bytes(p3.read_bytes())  # alpha=3's entry where alpha=2's should be
    _rerun(x, rejected_more=1)


def test_another_shapes_entry_is_rejected(cache_dir):
    double.cache_clear()
    double(torch.randn(32, 128))
    (small,) = _entries(cache_dir)
    double.cache_clear()
    double(torch.randn(64, 128))
    (large,) = set(_entries(cache_dir)) - {small}
    large.write_bytes(small.read_bytes())
    double.cache_clear()
    rejected = cache.STATS.rejected
    x = torch.randn(64, 128)
    torch.testing.assert_close(double(x), x * 2)
    assert cache.STATS.rejected == rejected + 1


def _flip(data):
    i = len(data) - 50
    return data[:i] + bytes([data[i] ^ 0x40]) + data[i + 1 :]


DAMAGE = {
    "flipped byte": _flip,
    "flipped magic": lambda d: d[:3] + b"X" + d[4:],
    "truncated": lambda d: d[:-100],
    "appended to": lambda d: d + b"more",
    "empty": lambda d: b"",
    "another format": lambda d: b"jax persistent cache entry",
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_entry_is_rejected_rebuilt_and_rewritten(cache_dir, damage):
    x = torch.randn(32, 128)
    double.cache_clear()
    double(x)
    (path,) = _entries(cache_dir)
    path.write_bytes(DAMAGE[damage](path.read_bytes()))
    damaged = path.read_bytes()
    double.cache_clear()
    rejected = cache.STATS.rejected
    with _lowerings() as counts:
        torch.testing.assert_close(double(x), x * 2)  # never the damaged entry's result
    assert cache.STATS.rejected == rejected + 1
    assert counts["lower"] == 1  # rebuilt from the source
    assert path.read_bytes() != damaged  # and rewritten
    double.cache_clear()
    hits = cache.STATS.hits
    torch.testing.assert_close(double(x), x * 2)
    assert cache.STATS.hits == hits + 1  # the rewritten entry loads


@pytest.mark.parametrize("kind", ["symlink to /dev/zero", "fifo", "directory", "oversized"])
def test_links_devices_and_oversized_files_are_refused_unread(cache_dir, kind, monkeypatch):
    x = torch.randn(32, 128)
    double.cache_clear()
    double(x)
    (path,) = _entries(cache_dir)
    if kind == "oversized":
        monkeypatch.setattr(store, "MAX_ENTRY_BYTES", 64)
    else:
        path.unlink()
        if kind == "fifo":
            os.mkfifo(path)  # opening it to read would block; reading it never ends
        elif kind == "directory":
            path.mkdir()
        else:
            path.symlink_to("/dev/zero")
    double.cache_clear()
    rejected = cache.STATS.rejected
    torch.testing.assert_close(double(x), x * 2)
    assert cache.STATS.rejected == rejected + 1
    if kind != "directory":  # replaced by a real entry (a directory cannot be renamed over)
        assert stat.S_ISREG(os.lstat(path).st_mode)


def test_a_link_to_a_real_entry_elsewhere_is_refused_unread(cache_dir, tmp_path):
    """The entry itself, right key and all, moved out of the cache and linked back: entries
    are never read through a link (whoever can place a link could point it at an entry in a
    folder the trust checks never saw), so it is rejected, rebuilt and replaced by a file."""
    x = torch.randn(32, 128)
    double.cache_clear()
    double(x)
    (path,) = _entries(cache_dir)
    elsewhere = tmp_path / "elsewhere" / path.name
    elsewhere.parent.mkdir()
    path.rename(elsewhere)
    path.symlink_to(elsewhere)
    stored = elsewhere.read_bytes()
    double.cache_clear()
    rejected, hits = cache.STATS.rejected, cache.STATS.hits
    torch.testing.assert_close(double(x), x * 2)
    assert (cache.STATS.rejected, cache.STATS.hits) == (rejected + 1, hits)
    assert stat.S_ISREG(os.lstat(path).st_mode)  # replaced, not written through the link
    assert elsewhere.read_bytes() == stored


def test_an_executable_that_fails_at_run_time_is_evicted_and_rebuilt_once(cache_dir, monkeypatch):
    x = torch.randn(16, 128)
    double.cache_clear()
    double(x)
    (path,) = _entries(cache_dir)
    real = serialize_executable.deserialize_and_load
    failures = []

    class Broken:  # what an executable of another program under this key would do
        def __init__(self, fn):
            self.in_avals, self.out_info = fn.in_avals, fn.out_info

        def __call__(self, *args):
            failures.append(1)
            raise RuntimeError("RuntimeProgramInputMismatch: the executable expects another input")

    monkeypatch.setattr(serialize_executable, "deserialize_and_load", lambda *a, **k: Broken(real(*a, **k)))
    double.cache_clear()
    evicted = cache.STATS.evicted
    with pytest.warns(RuntimeWarning, match=r"on-disk kernel cache .*failed at run time.*evicted"):
        out = double(x)
    torch.testing.assert_close(out, x * 2)
    assert failures == [1] and cache.STATS.evicted == evicted + 1
    assert path.exists()  # rewritten from a fresh compile (not loaded: rebuilt once)
    monkeypatch.setattr(serialize_executable, "deserialize_and_load", real)
    double.cache_clear()
    hits = cache.STATS.hits
    torch.testing.assert_close(double(x), x * 2)
    assert cache.STATS.hits == hits + 1


# ---- who may write the directory ------------------------------------------------------------
def _untrusted_build(cache_dir) -> list:
    double.cache_clear()
    x = torch.randn(8, 128)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        store._warned.clear()
        torch.testing.assert_close(double(x), x * 2)  # still right, compiled in the process
    return [str(w.message) for w in caught if "on-disk kernel cache" in str(w.message)]


def test_a_directory_others_can_write_is_not_used(cache_dir, monkeypatch):
    cache_dir.mkdir(parents=True)
    cache_dir.chmod(0o777)
    (message,) = _untrusted_build(cache_dir)
    assert "writable by everyone" in message and "TPU_KERNELS_CACHE_TRUST=shared" in message
    assert _entries(cache_dir) == []


def test_shared_trust_takes_a_group_writable_directory_but_never_one_everyone_can_write(
    cache_dir, monkeypatch
):
    """docs/caching.md: a fleet's directory is written by a group of trusted accounts, never by
    everyone; TPU_KERNELS_CACHE_TRUST=shared is the user's word for the first only."""
    monkeypatch.setattr(store, "_private_group", lambda gid: False)
    monkeypatch.setenv("TPU_KERNELS_CACHE_TRUST", "shared")
    cache_dir.mkdir(parents=True)
    cache_dir.chmod(0o2775)  # the documented fleet folder
    assert _untrusted_build(cache_dir) == []
    assert len(_entries(cache_dir)) == 1
    cache_dir.chmod(0o777)
    (message,) = _untrusted_build(cache_dir)
    assert "writable by everyone" in message and "TPU_KERNELS_CACHE_TRUST=shared does not allow" in message
    assert "chmod o-w" in message and "or set TPU_KERNELS_CACHE_TRUST=shared" not in message
    cache_dir.chmod(0o2775)
    host = cache_dir / "executables" / store.host()
    host.chmod(0o777)  # a folder below it
    (message,) = _untrusted_build(cache_dir)
    assert str(host) in message and "writable by everyone" in message
    host.chmod(0o755)
    (path,) = _entries(cache_dir)
    path.chmod(0o666)  # an entry anyone could have rewritten: rejected and replaced
    double.cache_clear()
    rejected, hits = cache.STATS.rejected, cache.STATS.hits
    x = torch.randn(8, 128)
    torch.testing.assert_close(double(x), x * 2)
    assert (cache.STATS.rejected, cache.STATS.hits) == (rejected + 1, hits)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644


def test_shared_trust_still_refuses_a_folder_above_that_everyone_can_write(tmp_path, monkeypatch):
    above = tmp_path / "open"
    above.mkdir()
    above.chmod(0o777)
    monkeypatch.setenv("TPU_KERNELS_CACHE_DIR", str(above / "kcache"))
    monkeypatch.setenv("TPU_KERNELS_CACHE_TRUST", "shared")
    (message,) = _untrusted_build(above / "kcache")
    assert "above the cache directory" in message


def test_a_group_writable_folder_below_it_is_not_used(cache_dir, monkeypatch):
    monkeypatch.setattr(store, "_private_group", lambda gid: False)
    double.cache_clear()
    double(torch.randn(4, 128))
    host = cache_dir / "executables" / store.host()
    host.chmod(0o775)
    (message,) = _untrusted_build(cache_dir)
    assert "writable by its group" in message and str(host) in message


def test_a_folder_above_it_that_everyone_can_write_is_not_used(tmp_path, monkeypatch):
    above = tmp_path / "open"
    above.mkdir()
    above.chmod(0o777)  # no sticky bit: anyone may replace what is inside
    monkeypatch.setenv("TPU_KERNELS_CACHE_DIR", str(above / "kcache"))
    monkeypatch.delenv("TPU_KERNELS_CACHE_TRUST", raising=False)
    (message,) = _untrusted_build(above / "kcache")
    assert "above the cache directory" in message
    above.chmod(0o1777)  # like /tmp: the sticky bit keeps others from renaming our folder
    assert _untrusted_build(above / "kcache") == []


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_an_entry_of_another_user_is_rejected(cache_dir):
    x = torch.randn(8, 128)
    double.cache_clear()
    double(x)
    (path,) = _entries(cache_dir)
    os.chown(path, 12345, -1)
    double.cache_clear()
    rejected = cache.STATS.rejected
    torch.testing.assert_close(double(x), x * 2)
    assert cache.STATS.rejected == rejected + 1


# ---- the command ---------------------------------------------------------------------------
def test_cache_info_and_clear(cache_dir, capsys):
    double.cache_clear()
    double(torch.randn(8, 128))
    double.cache_clear()
    double(torch.randn(8, 128))
    capsys.readouterr()
    assert cli.main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert str(cache_dir) in out
    assert "this host       1 entries" in out
    assert "kcache_test::double" in out and "hits 1" in out and "misses 1" in out
    (cache_dir / "exports").mkdir()  # format 1's folder: counted, removed by clear
    (cache_dir / "exports" / "old.jaxexp").write_bytes(b"x")
    assert cli.main(["cache", "info"]) == 0
    assert "old format      1 entries" in capsys.readouterr().out
    assert cli.main(["cache", "clear", "--dir", str(cache_dir)]) == 0
    assert "removed 3 files" in capsys.readouterr().out
    assert _entries(cache_dir) == []
    assert cli.main(["cache", "info", "--json"]) == 0
    assert '"entries": 0' in capsys.readouterr().out


@pytest.mark.parametrize("mode", [0o755, 0o777], ids=["ours", "world-writable"])
def test_cache_clear_never_leaves_the_directory(cache_dir, tmp_path, capsys, mode):
    double.cache_clear()
    double(torch.randn(8, 128))
    (entry_file,) = _entries(cache_dir)
    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    victims = [outside / "precious.txt", outside / "sub" / "deep.txt", tmp_path / "lone.txt"]
    for v in victims:
        v.write_text("keep me")
    tier = cache_dir / "executables"
    (tier / "cpu-planted").symlink_to(outside)  # a link where a host's folder belongs
    (tier / store.host() / "linked.tkexe").symlink_to(tmp_path / "lone.txt")  # one where an entry does
    (tier / store.host() / "folder").symlink_to(outside / "sub")
    (cache_dir / "exports").symlink_to(outside)  # format 1's folder, as a link
    (cache_dir / "xla-old").symlink_to(outside / "sub")
    (cache_dir / "stats.log").unlink()
    (cache_dir / "stats.log").symlink_to(tmp_path / "lone.txt")
    cache_dir.chmod(mode)
    assert cli.main(["cache", "clear", "--dir", str(cache_dir)]) == 0
    assert "removed 7 files" in capsys.readouterr().out
    assert [v.read_text() for v in victims] == ["keep me"] * 3
    assert not entry_file.exists() and sorted(p.name for p in tier.iterdir()) == [store.host()]
    assert sorted(p.name for p in cache_dir.iterdir()) == ["executables"]
    # and the whole tier as a link
    tier.rename(tmp_path / "tier-was-here")
    tier.symlink_to(outside)
    assert cli.main(["cache", "clear", "--dir", str(cache_dir)]) == 0
    assert "removed 1 files" in capsys.readouterr().out
    assert [v.read_text() for v in victims] == ["keep me"] * 3 and not os.path.lexists(tier)
    cache_dir.chmod(0o755)


def test_cache_info_counts_no_file_behind_a_link(cache_dir, tmp_path, capsys):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "a.tkexe").write_bytes(b"x" * 100)
    (cache_dir / "executables").mkdir(parents=True)
    (cache_dir / "executables" / "cpu-planted").symlink_to(outside)
    (cache_dir / "exports").symlink_to(outside)
    info = cache.info(cache_dir)
    assert info["all_hosts"] == {"entries": 0, "bytes": 0, "hosts": 0} and info["legacy"]["entries"] == 0
    (outside / store.host()).mkdir()  # the whole tier a link, to a folder holding this host's
    (outside / store.host() / "b.tkexe").write_bytes(b"x" * 100)
    (cache_dir / "executables" / "cpu-planted").unlink()
    (cache_dir / "executables").rmdir()
    (cache_dir / "executables").symlink_to(outside)
    info = cache.info(cache_dir)
    assert info["this_host"]["entries"] == info["all_hosts"]["entries"] == 0


def test_cache_command_when_off(monkeypatch, capsys):
    monkeypatch.setenv("TPU_KERNELS_CACHE_DIR", "off")
    assert cli.main(["cache", "info"]) == 0
    assert "off" in capsys.readouterr().err
    assert cli.main(["cache", "clear"]) == 2  # nothing to clear: say so, not "removed 0"


@pytest.mark.parametrize("action", ["info", "clear"])
def test_cache_command_on_a_path_that_is_not_a_readable_directory(tmp_path, capsys, monkeypatch, action):
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    assert cli.main(["cache", action, "--dir", str(a_file)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"tpu-kernels cache: error: {a_file} is not a directory"
    monkeypatch.setattr(os, "access", lambda *a, **k: False)  # root reads anything: simulate
    assert cli.main(["cache", action, "--dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip().endswith("cannot read it (permission denied)")


# ---- processes -------------------------------------------------------------------------------
_SCALED = """
import sys
import torch
import cfg
from tpu_kernels import tpu_kernel
from tpu_kernels.runtime import cache

cfg.Cfg.scale = float(sys.argv[1])  # from a command-line flag or a config file
if len(sys.argv) > 2:
    cfg.Helpers.offset = staticmethod(lambda: float(sys.argv[2]))  # a monkeypatched helper


@tpu_kernel("demo::scaled")
def scaled(x: torch.Tensor) -> torch.Tensor:
    return x * cfg.Cfg.scale + cfg.Helpers.offset()


print("result", scaled(torch.ones(2, 4))[0, 0].item(), "hits", cache.STATS.hits)
"""
_CFG = """
class Cfg:
    scale = 1.0


class Helpers:
    @staticmethod
    def offset():
        return 0.0
"""


def _run(script: Path, cache_dir: Path, *args: str) -> str:
    env = {
        **os.environ,
        "PYTHONPATH": f"{ROOT}{os.pathsep}{script.parent}",
        "TPU_KERNELS_CACHE_DIR": str(cache_dir),
    }
    r = subprocess.run(
        [sys.executable, str(script), *args], env=env, capture_output=True, text=True, timeout=240
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[-1]


@pytest.mark.slow  # five fresh processes
def test_run_time_state_reaches_every_later_process(cache_dir, tmp_path):
    """The issue's repro: a value set at run time, and a monkeypatched staticmethod, read by
    the trace; a source fingerprint saw neither, and every later process got the first's."""
    script = tmp_path / "k.py"
    script.write_text(_SCALED)
    (tmp_path / "cfg.py").write_text(_CFG)
    assert _run(script, cache_dir, "2") == "result 2.0 hits 0"
    assert _run(script, cache_dir, "5") == "result 5.0 hits 0"
    assert _run(script, cache_dir, "2") == "result 2.0 hits 1"  # its own entry, from disk
    assert _run(script, cache_dir, "2", "1") == "result 3.0 hits 0"
    assert _run(script, cache_dir, "2", "1") == "result 3.0 hits 1"


_AFFINE = """
import sys, time
import jax
import torch
from jax.experimental import pallas as pl
from tpu_kernels import tpu_kernel
from tpu_kernels.runtime import cache

lowered = []
jax.monitoring.register_event_duration_secs_listener(
    lambda e, d, **k: lowered.append(e) if e.endswith("jaxpr_to_mlir_module_duration") else None
)


def _kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 3.0 + 1.0


@tpu_kernel("kcache_proc::affine")
def affine(x: torch.Tensor) -> torch.Tensor:
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
print("stats", cache.STATS.hits, cache.STATS.misses, cache.STATS.rejected, "lowered", len(lowered))
print("scipy.linalg imported:", "scipy.linalg" in sys.modules)
"""


@pytest.mark.slow  # three fresh processes: 50 s on the loaded 2-core machine, ~15 s idle
def test_two_processes_write_at_once_and_a_third_loads_without_lowering(cache_dir, tmp_path):
    script = tmp_path / "affine_kernel.py"
    script.write_text(_AFFINE)
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
        assert "stats 0 1 0 lowered 1" in out
    assert len(_entries(cache_dir)) == 1
    assert not [p for p in _entries(cache_dir)[0].parent.iterdir() if p.name.startswith(".tmp-")]
    reader = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=240
    )
    assert reader.returncode == 0, reader.stderr
    assert "stats 1 0 0 lowered 0" in reader.stdout  # a new process: traced, not lowered
    assert "scipy.linalg imported: False" in reader.stdout  # no LAPACK set-up for a kernel without


@pytest.mark.slow  # three fresh processes: about 30 s here
def test_a_process_under_other_xla_flags_builds_its_own_entry(cache_dir, tmp_path):
    """XLA_FLAGS and JAX's compile settings change what XLA compiles (its optimisation passes,
    the code it emits): a process started under others must not load an executable compiled
    under these. The first process builds and stores; the second, under other flags, and the
    third, under JAX_DISABLE_MOST_OPTIMIZATIONS=1, each miss and store an entry of their own."""
    script = tmp_path / "affine_kernel.py"
    script.write_text(_AFFINE)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TPU_KERNELS_CACHE_DIR": str(cache_dir)}
    env.pop("JAX_DISABLE_MOST_OPTIMIZATIONS", None)
    outs = []
    for flags, extra in (
        ("--xla_backend_optimization_level=0", {}),
        ("--xla_backend_optimization_level=1", {}),
        ("--xla_backend_optimization_level=1", {"JAX_DISABLE_MOST_OPTIMIZATIONS": "1"}),
    ):
        r = subprocess.run(
            [sys.executable, str(script)], env={**env, "XLA_FLAGS": flags, **extra}, capture_output=True,
            text=True, timeout=240,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        outs.append(r.stdout)
    for out in outs:  # not "stats 1 0 0": another process's entry
        assert "stats 0 1 0 lowered 1" in out, out
    assert len(_entries(cache_dir)) == 3


@pytest.mark.parametrize(
    "option, value",
    [
        ("jax_disable_most_optimizations", True),
        ("jax_optimization_level", "O0"),
        ("jax_memory_fitting_level", "O0"),
    ],
)
def test_jax_compile_options_keep_entries_apart(cache_dir, option, value):
    """JAX_DISABLE_MOST_OPTIMIZATIONS=1 or JAX_OPTIMIZATION_LEVEL=O0 (the environment sets the
    same config) change the executable XLA builds: a build under them must not load the one
    compiled under the defaults, nor the defaults load theirs."""
    x = torch.randn(8, 128)
    double.cache_clear()
    double(x)
    before = jax.config.values[option]
    misses, hits = cache.STATS.misses, cache.STATS.hits
    jax.config.update(option, value)
    try:
        double.cache_clear()
        torch.testing.assert_close(double(x), x * 2)
        assert (cache.STATS.misses, cache.STATS.hits) == (misses + 1, hits)  # its own entry
    finally:
        jax.config.update(option, before)
    assert len(_entries(cache_dir)) == 2
    double.cache_clear()
    double(x)
    assert (cache.STATS.misses, cache.STATS.hits) == (misses + 1, hits + 1)  # the defaults' again


@needs_tokamax
def test_importing_tokamax_leaves_the_disk_cache_on():
    """Tokamax's config options are JAX user contexts whose default is a bare object(): the
    trace settings read it as a sentinel, so importing Tokamax does not make every kernel
    uncacheable."""
    import tpu_kernels.tokamax  # noqa: F401 - creates Tokamax's user contexts

    assert build.trace_settings() is not None


def test_the_entry_format_checks_its_key_and_checksum():
    data = entry.encode("k1", {"op": "a::b"}, b"payload")
    assert entry.decode(data, "k1") == ({"op": "a::b", "format": entry.FORMAT, "key": "k1"}, b"payload")
    with pytest.raises(entry.Rejected, match="another key"):
        entry.decode(data, "k2")
    with pytest.raises(entry.Rejected, match="checksum"):
        entry.decode(data[:-1] + b"X", "k1")
    with pytest.raises(entry.Rejected, match="length"):
        entry.decode(data + b"X", "k1")
    with pytest.raises(entry.Rejected, match="header"):
        entry.decode(textwrap.dedent("not an entry").encode(), "k1")


@needs_tokamax
def test_shipped_and_tokamax_ops_forward_and_backward_are_stored(cache_dir):
    """Their programs hold custom_vjp/custom_vmap/remat_opt rules, which lowering never
    calls: each is skipped by name (cache.program._NOT_LOWERED), not refused."""
    import tpu_kernels.tokamax as tk
    from tpu_kernels import kernels
    from tpu_kernels.tokamax.attention.op import dot_product_attention_op
    from tpu_kernels.tokamax.normalization.op import layer_norm_op

    for op in (kernels.softmax, kernels.rmsnorm, layer_norm_op, dot_product_attention_op):
        for o in (op, op.backward_op):  # built now, whatever earlier tests compiled in memory
            o.cache_clear()
    x = torch.randn(16, 128, requires_grad=True)
    w = torch.randn(128, requires_grad=True)
    q = torch.randn(1, 8, 2, 16, requires_grad=True)
    before = cache.STATS.uncacheable
    writes = cache.STATS.writes
    for out in (
        kernels.softmax(x),
        kernels.rmsnorm(x, w),
        tk.rms_norm(x, w),
        tk.dot_product_attention(q, q, q),
    ):
        out.sum().backward()
    assert cache.STATS.uncacheable == before
    assert cache.STATS.writes >= writes + 8  # each forward and backward op stored
