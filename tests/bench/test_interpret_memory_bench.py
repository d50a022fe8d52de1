"""bench/interpret_memory.py at a small size: it runs, and prints the interpreter's factor.

The figures are printed (`pytest -s`), not held to JAX's current value: only plain XLA's
rise, the output itself, is checked, as a check of the measuring method (peak resets)."""

import sys

import pytest

from tests.helpers import load_bench_script


@pytest.fixture(scope="module")
def memory():
    return load_bench_script("interpret_memory")


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
