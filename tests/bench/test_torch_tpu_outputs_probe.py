"""bench/torch_tpu_outputs_probe.py (the probe that runs on a TPU through torch_tpu) on a CPU:
every function it times computes what its name says (the Pallas ones in the interpreter), and
torch_tpu's real `jax_op` accepts each one's signature, as it must on the chip."""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.pallas import tpu as pltpu

from tests.bench import probes

ROOT = Path(__file__).resolve().parents[2]


def _probe():
    return probes.load("torch_tpu_outputs_probe.py")


def test_each_function_computes_what_its_name_says():
    probe = _probe()
    x = jax.random.normal(jax.random.PRNGKey(0), (512, 256), jnp.float32)
    w = jax.random.normal(jax.random.PRNGKey(1), (256,), jnp.float32)
    s = np.asarray(x, np.float64).sum(-1, keepdims=True)
    with pltpu.force_tpu_interpret_mode():
        got = {name: fn(x, w if name == "vector_input" else w[None]) if name.endswith("_input") else fn(x)
               for name, fn in probe.FUNCTIONS.items()}
    for name in ("one", "pallas_one"):
        np.testing.assert_allclose(got[name], 2 * x)
    np.testing.assert_allclose(got["two_same"][1], 3 * x)
    for name in ("two_column", "pallas_two"):
        np.testing.assert_allclose(got[name][0], 2 * x)
        np.testing.assert_allclose(got[name][1], s, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(got["two_lanes"][1], np.broadcast_to(s, (512, 128)), rtol=1e-5, atol=1e-4)
    for name in ("vector_input", "row_input"):
        np.testing.assert_allclose(got[name], x * w)


def test_torch_tpus_jax_op_takes_every_function():
    pytest.importorskip("torch_tpu")
    from tpu_kernels.runtime.devices.tpu import torch_tpu_pallas

    jax_op = torch_tpu_pallas().jax_op
    for name, fn in _probe().FUNCTIONS.items():
        assert jax_op(f"outputs_probe_test::{name}", fn) is not None


def test_the_committed_v5e_record_holds_every_function_and_what_the_docs_say_of_it():
    """bench/reports/torch_tpu_outputs_v5e.json (a chip run): a time for every function at each
    shape, and the finding docs/devices.md states: at both sizes, a call with a second output
    costs more than half again a one-output call, Pallas or XLA, column or full-size, and a 1-D
    input costs no more than a 2-D one."""
    import json

    probe = _probe()
    record = json.loads((ROOT / "bench" / "reports" / "torch_tpu_outputs_v5e.json").read_text())
    assert record["kind"] == "torch_tpu_outputs_probe" and record["commit"]
    assert set(record["per_call_us"]) == set(probe.SHAPES)
    for label, row in record["per_call_us"].items():
        assert set(row) == set(probe.FUNCTIONS) | {"rmsnorm"}, label
        assert all(isinstance(v, float) for v in row.values()), (label, row)
        for two, one in (("two_same", "one"), ("two_column", "one"), ("two_lanes", "one"), ("pallas_two", "pallas_one"),
                         ("rmsnorm", "one")):
            assert row[two] > 1.5 * row[one], (label, two, row)
        assert row["vector_input"] <= 1.1 * row["row_input"], (label, row)
