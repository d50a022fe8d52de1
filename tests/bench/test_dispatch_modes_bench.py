"""bench/dispatch_modes.py: its table from a figures record (what the performance page shows),
and that each mode's process really runs in the mode it is given (a short run of the script)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tpu_kernels import docs_perf

ROOT = Path(__file__).resolve().parents[2]


def _mode(per_call: float, ctrl_c: float, right: bool = True) -> dict:
    op = {"per_call_us": per_call, "calls_per_s_1_thread": 1e6 / per_call, "calls_per_s_2_threads": 5e5 / per_call}
    return {
        "async_dispatch": None,
        "ops": {
            "small": {"shape": [32, 32], **op, "threads_right": right},
            "large": {"shape": [1024, 1024], **{k: v * 100 for k, v in op.items()}, "threads_right": True},
        },
        "ctrl_c": {"seconds_to_interrupt": ctrl_c, "tries": 3, "right_after": True},
    }


def test_the_table_sets_the_modes_side_by_side_and_says_whether_every_result_was_right():
    module = docs_perf.script("dispatch_modes")
    lines = module.table({"synchronous": _mode(40.0, 0.002), "asynchronous": _mode(80.0, 0.004)}).splitlines()
    assert lines[2] == "| x * 2 + y 32x32: time per call | 40.0 us | 80.0 us | 0.50 |"
    assert lines[3] == "| x * 2 + y 32x32: calls/s, 1 thread | 25000  | 12500  | 2.00 |"
    assert lines[-3] == "| Ctrl-C during x @ y: seconds to KeyboardInterrupt | 0.002 s | 0.004 s | 0.50 |"
    assert lines[-1].startswith("Every result")
    wrong = module.table({"synchronous": _mode(40.0, 0.002, right=False), "asynchronous": _mode(80.0, 0.004)})
    assert wrong.splitlines()[-1].startswith("WRONG RESULTS")


@pytest.mark.slow
def test_each_modes_process_runs_in_its_mode_and_gets_right_results():
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT), "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    for value, want in (("0", False), ("1", True)):
        out = subprocess.run(
            [sys.executable, "bench/dispatch_modes.py", "--child", "--rounds", "1"],
            cwd=ROOT,
            env={**env, "TPU_KERNELS_CPU_ASYNC_DISPATCH": value},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert out.returncode == 0, out.stderr[-3000:]
        figures = json.loads(out.stdout.strip().splitlines()[-1])
        assert figures["async_dispatch"] is want
        assert all(op["threads_right"] for op in figures["ops"].values())
