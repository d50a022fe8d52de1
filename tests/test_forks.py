"""A process forked after JAX started: its first compile is refused with a clear error, never
a hang (tpu_kernels/runtime/forks.py). Real forks, in a fresh interpreter under a timeout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

_SCRIPT = r"""
import faulthandler, os, sys, warnings
warnings.simplefilter("ignore")  # Python's and JAX's notes that fork and threads do not mix
import torch
from tpu_kernels.kernels import rmsnorm  # a Pallas kernel: its compile in such a child hung

w = torch.ones(128)


def norm(rows):
    return round(rmsnorm(torch.ones(rows, 128), w).sum().item())


def in_child(call):
    pid = os.fork()
    if pid == 0:
        faulthandler.dump_traceback_later(int(os.environ.get('HANG_S', '30')), exit=True)  # a hang ends the child, not the test
        try:
            print("child:", call(), flush=True)
        except Exception as e:
            print("child raised:", type(e).__name__, str(e), flush=True)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    print("child status", status, flush=True)


if sys.argv[1] == "before":
    in_child(lambda: norm(8))  # JAX not started in this process: the child compiles
else:
    norm(8)  # JAX starts here
    in_child(lambda: norm(8))  # compiled before the fork: runs
    in_child(lambda: norm(24))  # a new shape: a compile, refused (it hung)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork on this platform")
@pytest.mark.parametrize("when", ["before", "after"])
def test_a_child_forked_after_jax_started_is_told_instead_of_hanging(tmp_path, when):
    """Without the check the "after" child's compile hung (its faulthandler ended it: status
    256); a child forked before JAX started compiles as any process does."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TPU_KERNELS_CACHE_DIR": str(tmp_path / "kcache")}
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT, when], env=env, capture_output=True, text=True, timeout=240
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines[:2] == ["child: 1024", "child status 0"], (lines, out.stderr[-3000:])
    if when == "before":
        return
    assert lines[2].startswith(
        "child raised: BackendUnavailableError tpu_kernels::rmsnorm: this process was forked"
    )
    assert "multiprocessing_context='spawn'" in lines[2] and lines[3] == "child status 0"
