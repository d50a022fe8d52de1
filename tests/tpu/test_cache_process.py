"""Compiled kernels reused by a second process on the chip: two child processes in turn call
shipped ops on TPU tensors with the same cache directories; the second must compile nothing.

On a TPU the compile is torch_tpu's, not tpu_kernels' or JAX's: torch_tpu's `jax_op` exports
the kernel (`jax.export`, StableHLO), registers the module by its fingerprint and compiles it
in torch_tpu's own compilation cache. Its tier 1 is in memory, tier 2 (shared memory) is off
for one process ("Tier-2 compilation cache is disabled for world size 1"), and tier 3 is on
disk under `TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT` (names read from torch_tpu 0.2.0's
libpywrap: "Writing to tier-3 cache for key", "Tier-3 cache HIT for key"). tpu_kernels' own
disk cache serves only the CPU path (tpu_kernels/runtime/cache/__init__.py), and JAX only
lowers here; both directories are given too, and what lands in them is recorded, not asserted.

The observable: the first process writes files under the tier-3 root; the second writes or
changes none there and logs no tier-3 miss (or it logs tier-3 hits); and both compute the same
bits. The children log at INFO (`TF_CPP_MIN_LOG_LEVEL=0`, `TF_CPP_VMODULE` for the cache's
sources) so that torch_tpu's cache lines, if it logs them, reach their stderr.

One process at a time may hold the chip (libtpu's /tmp/libtpu_lockfile: "The TPU is already
in use by process with pid ..."), so the children run one after the other, and only while this
pytest process holds no TPU: in the suite's order (scripts/tpu-suite, one process, files by
name) this file and test_bench_cli.py run before any test that puts a tensor on the chip. A
run where this process already holds it fails saying so; it cannot pass without its children.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import glob
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
PROBE_ENV = "TPU_KERNELS_TPU_PROBE"  # tests/tpu/conftest.py
TIER3_ENV = "TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT"
LIBTPU_LOCKFILE = Path("/tmp/libtpu_lockfile")
TPU_DEVICE_FILES = ("/dev/accel*", "/dev/vfio/*")
# scripts/tpu-suite waits 5 s between two programs on the chip: "the chip is free again a few
# seconds after a program ends"
SETTLE_S = 5.0
BUSY = re.compile(r"already in use|libtpu_lockfile|Device or resource busy", re.I)
ATTEMPTS = 3  # a child that finds the chip busy (the previous one still letting go) runs again
CHILD_TIMEOUT_S = 300  # a cold start imports torch, torch_tpu and JAX and compiles: tens of seconds
CACHE_LINE = re.compile(r"tier-3|tier3|compilationcache|compilation cache", re.I)


# ---- the chip, one process at a time --------------------------------------------------------
def chip_lock_holders() -> set[int]:
    """The processes holding a lock on libtpu's lockfile (read from /proc/locks): whoever has
    the chip open."""
    try:
        st = os.stat(LIBTPU_LOCKFILE)
        text = Path("/proc/locks").read_text()
    except OSError:
        return set()
    lockfile = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    pids = set()
    for line in text.splitlines():  # "1: FLOCK  ADVISORY  WRITE <pid> <major>:<minor>:<inode> 0 EOF"
        fields = [f for f in line.split() if f != "->"]  # "->": a waiter, listed under the holder
        if len(fields) < 6 or fields[5].count(":") != 2:
            continue
        major, minor, inode = fields[5].split(":")
        if (int(major, 16), int(minor, 16), int(inode)) == lockfile:
            pids.add(int(fields[4]))
    return pids


def this_process_holds_the_chip() -> str | None:
    """How this process holds the TPU (a device file open, libtpu's lock, torch_tpu's runtime
    started), or None."""
    own = []
    for fd in glob.glob("/proc/self/fd/*"):
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if any(fnmatch.fnmatch(target, p) for p in TPU_DEVICE_FILES):
            own.append(target)
    if own:
        return f"it has {', '.join(sorted(set(own)))} open"
    if os.getpid() in chip_lock_holders():
        return f"it holds the lock on {LIBTPU_LOCKFILE}"
    tpu = getattr(torch, "tpu", None)
    if tpu is not None and hasattr(tpu, "is_initialized") and tpu.is_initialized():
        return "torch_tpu's runtime is started in it (torch.tpu.is_initialized())"
    return None


def refuse_if_this_process_holds_the_chip(what: str) -> None:
    how = this_process_holds_the_chip()
    if how:
        pytest.fail(
            f"{what} needs child processes on the TPU, but this pytest process already holds the "
            f"chip ({how}: an earlier test ran on it), and libtpu lets one process at a time "
            f"open it. Run this file first or on its own (scripts/tpu-suite runs tests/tpu by "
            f"file name, where it comes before any test that uses the chip in-process)."
        )


def wait_until_the_chip_is_free(timeout_s: float = 60.0) -> None:
    """Until no process holds libtpu's lock, then SETTLE_S more."""
    deadline = time.monotonic() + timeout_s
    while chip_lock_holders() and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(SETTLE_S)


@dataclasses.dataclass
class Child:
    returncode: int
    stdout: str
    stderr: str
    wall_s: float
    attempts: int

    def line(self, prefix: str) -> dict:
        """The JSON object the child printed after `prefix`."""
        for ln in self.stdout.splitlines():
            if ln.startswith(prefix):
                return json.loads(ln[len(prefix) :])
        pytest.fail(f"the child printed no {prefix!r} line; its stdout ends:\n{self.stdout[-2000:]}")

    def cache_lines(self, limit: int = 40) -> list[str]:
        return [ln[:300] for ln in self.stderr.splitlines() if CACHE_LINE.search(ln)][:limit]


def child_env(**extra: str) -> dict[str, str]:
    """The suite's environment for a child on the chip: JAX on the TPU (and the CPU), tpu_kernels
    from this checkout, plus `extra`."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "JAX_PLATFORMS": "tpu,cpu", "PYTHONPATH": path, "PYTHONUNBUFFERED": "1", **extra}
    env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)  # the parent's (scripts/tpu-suite): torch_tpu loads here
    env.pop(PROBE_ENV, None)
    return env


def run_on_chip(args: list[str], env: dict[str, str], cwd: Path, timeout_s: float = CHILD_TIMEOUT_S) -> Child:
    """`python args...` as a child holding the chip, once no process holds it; again (up to
    ATTEMPTS) if it found the chip busy; and the chip let go of before returning."""
    for attempt in range(1, ATTEMPTS + 1):
        if chip_lock_holders():
            wait_until_the_chip_is_free()
        started = time.monotonic()
        try:
            r = subprocess.run(
                [sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout_s
            )
        except subprocess.TimeoutExpired as e:
            wait_until_the_chip_is_free()
            err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
            pytest.fail(
                f"python {' '.join(args)} did not finish in {timeout_s} s; its stderr ends:\n{err[-3000:]}"
            )
        child = Child(r.returncode, r.stdout, r.stderr, time.monotonic() - started, attempt)
        wait_until_the_chip_is_free()
        if child.returncode == 0 or not BUSY.search(child.stderr) or attempt == ATTEMPTS:
            return child
    raise AssertionError("unreachable")


def check_ran(child: Child, what: str) -> None:
    if child.returncode != 0:
        busy = " (libtpu found the chip in use by another process)" if BUSY.search(child.stderr) else ""
        pytest.fail(
            f"{what} exited with {child.returncode}{busy} after {child.attempts} attempt(s); "
            f"its stderr ends:\n{child.stderr[-4000:]}"
        )


# ---- the test -------------------------------------------------------------------------------
CHILD = r"""
import json, sys, time
started = time.perf_counter()
import tpu_kernels  # first, as users do (tpu_kernels.startup)
import torch
from tpu_kernels.kernels import matmul, rmsnorm, softmax
from tpu_kernels.runtime import cache

tpu = torch.device("tpu")
g = torch.Generator().manual_seed(0)
x, w = torch.randn(256, 512, generator=g), torch.randn(512, generator=g)
a, b = torch.randn(256, 512, generator=g), torch.randn(512, 384, generator=g)
xt, wt, at, bt = (t.to(tpu) for t in (x, w, a, b))
ready = time.perf_counter()
out = {"softmax": softmax(xt), "rmsnorm": rmsnorm(xt, wt), "matmul": matmul(at, bt)}
assert all(t.device.type == "tpu" for t in out.values()), {k: t.device for k, t in out.items()}
host = {k: t.cpu() for k, t in out.items()}  # read: every kernel compiled (or loaded) and ran
done = time.perf_counter()
torch.save(host, sys.argv[1])
stats = getattr(torch.tpu, "_get_cache_stats", None)
try:
    stats = stats() if stats is not None else None
except Exception as e:
    stats = f"{type(e).__name__}: {e}"
print("CHILD " + json.dumps({
    "device": torch.tpu.get_device_name(),
    "start_s": ready - started,
    "first_calls_s": done - ready,
    "torch_tpu_cache_stats": stats if isinstance(stats, (dict, list, int, float, type(None))) else repr(stats),
    "tpu_kernels_disk_cache": {"hits": cache.STATS.hits, "misses": cache.STATS.misses, "writes": cache.STATS.writes},
}, default=repr))
"""


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under `root`: relative path -> (size, mtime in ns)."""
    if not root.is_dir():
        return {}
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in root.rglob("*")
        if p.is_file()
    }


def _count(child: Child, pattern: str) -> int:
    return sum(1 for ln in child.stderr.splitlines() if pattern.lower() in ln.lower())


def test_a_second_process_reuses_the_first_ones_compiled_kernels(tmp_path, figures):
    refuse_if_this_process_holds_the_chip("the second-process cache test")
    dirs = {name: tmp_path / name for name in ("torch_tpu_tier3", "jax", "tpu_kernels")}
    env = child_env(
        **{
            TIER3_ENV: str(dirs["torch_tpu_tier3"]),
            "JAX_COMPILATION_CACHE_DIR": str(dirs["jax"]),
            "TPU_KERNELS_CACHE_DIR": str(dirs["tpu_kernels"]),
            "TF_CPP_MIN_LOG_LEVEL": "0",
            "TF_CPP_VMODULE": "tier3_compilation_cache=1,tier2_compilation_cache=1,compilation_cache=1",
        }
    )
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    children, snaps, results = [], [], []
    for i in (1, 2):
        out = tmp_path / f"results_{i}.pt"
        child = run_on_chip([str(script), str(out)], env, cwd=tmp_path)
        check_ran(child, f"child process {i}")
        children.append(child)
        snaps.append({name: snapshot(d) for name, d in dirs.items()})
        results.append(torch.load(out, weights_only=True))
    first, second = children
    info = [c.line("CHILD ") for c in children]
    tier3 = [s["torch_tpu_tier3"] for s in snaps]
    written_by_second = sorted(p for p, v in tier3[1].items() if tier3[0].get(p) != v)
    logged = {
        which: {k: _count(c, k) for k in ("Tier-3 cache HIT", "Tier-3 cache MISS", "Writing to tier-3 cache")}
        for which, c in (("first", first), ("second", second))
    }
    figures.update(
        device=info[0]["device"],
        process_s=[round(c.wall_s, 2) for c in children],
        first_calls_s=[round(i["first_calls_s"], 3) for i in info],
        start_s=[round(i["start_s"], 2) for i in info],
        attempts=[c.attempts for c in children],
        tier3_files=[len(t) for t in tier3],
        tier3_written_by_second=written_by_second[:20],
        files_in={name: [len(s[name]) for s in snaps] for name in ("jax", "tpu_kernels")},
        logged=logged,
        torch_tpu_cache_stats=[i["torch_tpu_cache_stats"] for i in info],
        tpu_kernels_disk_cache=[i["tpu_kernels_disk_cache"] for i in info],
        cache_log=[c.cache_lines(15) for c in children],
    )
    assert "tpu" in info[0]["device"].lower(), info[0]

    for name in results[0]:
        assert torch.equal(results[0][name], results[1][name]), (
            f"{name}: the second process computed other values than the first "
            f"(max |diff| {(results[0][name] - results[1][name]).abs().max().item():.3g})"
        )
    assert tier3[0], (
        f"the first process wrote nothing under {TIER3_ENV}={dirs['torch_tpu_tier3']}: torch_tpu's "
        f"on-disk (tier-3) compilation cache stayed off, so nothing can be reused by a second "
        f"process. Its cache log lines: {first.cache_lines()}"
    )
    hits, misses = logged["second"]["Tier-3 cache HIT"], logged["second"]["Tier-3 cache MISS"]
    reused = not misses and (hits > 0 or not written_by_second)
    assert reused, (
        f"the second process compiled again instead of loading the first one's executables: it "
        f"wrote or changed {len(written_by_second)} file(s) under the tier-3 root "
        f"({written_by_second[:10]}) and logged {misses} tier-3 miss(es), {hits} hit(s). "
        f"Its cache log lines: {second.cache_lines()}; the first's: {first.cache_lines(10)}"
    )
