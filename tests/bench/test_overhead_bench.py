"""bench/overhead.py: the per-op table's ratios and verdicts, and its direct call's wait.

In a fresh process: the script registers its own ops when imported, and the harness's quick run
(tests/bench/test_suites.py) imports it as a suite in the test process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import json, sys
sys.path.append("bench")
import jax, jax.numpy as jnp
import overhead

row = overhead.op_row("x 32x32", op_us=46.0, floor_us=40.0, direct_us=20.0)
lines = overhead.op_table([row, overhead.op_row("y 128x256", 60.0, 50.0, 50.0)])
rows = [row, overhead.op_row("y 128x256", 60.0, 50.0, 50.0)]
markdown = overhead.op_markdown(rows, True)
markdown_twins, markdown_unrecorded = overhead.op_markdown(rows, False), overhead.op_markdown(rows)
single = jax.jit(lambda a: a * 2)
pair = jax.jit(lambda a: (a + 1, [a - 1]))
a = jnp.arange(6.0)
outs = [overhead.waited(single, [a])(), overhead.waited(pair, [a])()]
leaves = jax.tree_util.tree_leaves(outs)
print(json.dumps({"row": row, "lines": lines, "markdown": markdown, "markdown_twins": markdown_twins,
                  "markdown_unrecorded": markdown_unrecorded, "ready": [x.is_ready() for x in leaves],
                  "values": [x.tolist() for x in leaves]}))
"""


def test_op_table_ratios_verdicts_and_the_direct_calls_wait():
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["row"] == {
        "name": "x 32x32",
        "op_us": 46.0,
        "floor_us": 40.0,
        "direct_us": 20.0,
        "op_over_floor": 1.15,
        "op_over_direct": 2.3,
        "floor_over_direct": 2.0,
    }
    header, first, second, floor_verdict, direct_verdict = r["lines"]
    assert header.split() == ["op", "floor", "us", "op", "us", "direct", "us", "op/floor", "op/direct"]
    assert first.split()[-5:] == ["40.0", "46.0", "20.0", "1.15", "2.30"]
    assert second.split()[-5:] == ["50.0", "60.0", "50.0", "1.20", "1.20"]
    # the worst of each ratio is judged: 1.20 misses 1.15; 2.30 misses both 1.5 and 1.3
    assert floor_verdict == "worst op/floor 1.20 (goal <= 1.15: MISSED)"
    assert direct_verdict == "worst op/direct 2.30 (goal <= 1.5: MISSED; stretch <= 1.3: missed)"
    # the generated page's table: the same figures and verdicts
    md = r["markdown"].splitlines()
    assert md[2] == "| x 32x32 | 40.0 us | 46.0 us | 20.0 us | 1.15 | 2.30 |"
    assert md[3] == "| y 128x256 | 50.0 us | 60.0 us | 50.0 us | 1.20 | 1.20 |"
    assert md[-3] == "- worst op / floor: 1.20 (goal: at most 1.15, not met)"
    assert md[-2] == "- worst op / direct: 2.30 (goal: at most 1.5, not met; stretch 1.3)"
    # a record measured with the C++ checks (native_checks, before they were removed) says so
    assert md[-1].startswith(
        "- measured with the eager shortcut's checks in C++ (tpu_kernels/runtime/native, since removed"
    )
    assert r["markdown_twins"] == r["markdown_unrecorded"] == "\n".join(md[:-1])
    # a single array and a pytree of them both come back ready, with the function's values
    assert r["ready"] == [True, True, True]
    assert r["values"] == [
        [0.0, 2.0, 4.0, 6.0, 8.0, 10.0],
        [1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
        [-1.0, 0.0, 1.0, 2.0, 3.0, 4.0],
    ]
