"""bench/interpret_memory.py at a small size: it runs, and prints the interpreter's factor.

The figures are printed (`pytest -s`), not held to JAX's current value: only plain XLA's
rise, the output itself, is checked, as a check of the measuring method (peak resets)."""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def memory():
    spec = importlib.util.spec_from_file_location(
        "bench_interpret_memory", ROOT / "bench" / "interpret_memory.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_prints_the_interpreters_factor(memory):
    xla = memory._run_child("xla", 32)
    pallas = memory._run_child("pallas_jax", 32)
    out = xla["out_bytes"]
    print(
        f"\n32 MiB output: plain XLA run {xla['run_rise'] / out:.2f}x, "
        f"Pallas interpreter run {pallas['run_rise'] / out:.2f}x (compile {pallas['compile_rise'] / out:.2f}x)"
    )
    # the output is written in full: a rise below it means the peak was not reset
    assert 0.9 <= xla["run_rise"] / out <= 1.5, xla
    assert pallas["run_rise"] >= 0.9 * out, pallas
