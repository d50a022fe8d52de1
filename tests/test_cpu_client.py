"""tpu_kernels/cpu_client.py: JAX's CPU client runs each computation in the calling thread when
tpu_kernels is the first to use JAX, and a program that made its own JAX arrays first gets one
note saying how to do that itself.

Each case runs in a fresh process (JAX reads the flag once, when it makes its clients), all
at once. Whether the client dispatches synchronously is read off the client itself: a jitted
computation of some 100 ms is ready the moment the call returns only when it ran in the
calling thread (asynchronously, the call returns while a worker thread still computes).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tpu_kernels import cpu_client

ROOT = Path(__file__).resolve().parents[1]

_PRELUDE = """
import json, sys
import numpy as np
import torch
import jax
from tpu_kernels import _compat, tpu_kernel

@tpu_kernel("cpu_client_case::add")
def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x + y

x, y = torch.randn(8, 128), torch.randn(8, 128)
made_by_import = _compat.get("jax_backends_initialized")()
"""

_PROBE = """
import jax.numpy as jnp
spin = jax.jit(lambda a: jax.lax.fori_loop(0, 40, lambda i, b: jnp.tanh(b @ b * 1e-3), a))
spin(np.ones((8, 8), np.float32)).block_until_ready()  # compiled for another shape: only a run below
ready = spin(np.ones((256, 256), np.float32)).is_ready()
print(json.dumps({"made_by_import": made_by_import, "ready_on_return": ready, "ok": ok,
                  "flag": jax.config.read("jax_cpu_enable_async_dispatch")}))
"""

# what runs first in each process: tpu_kernels' entry points into JAX, or the program's own JAX
CASES = {
    "an op call": (  # the shipped ops imported too: importing makes no JAX client
        "import tpu_kernels.kernels, tpu_kernels.tokamax\n"
        'made_by_import = _compat.get("jax_backends_initialized")()\n'
        "ok = all(torch.equal(add(x, y), x + y) for _ in range(3))"  # a fresh tensor, then cached views
    ),
    "a TPU lowering": (
        "import tpu_kernels.kernels\nok = 'tpu_custom_call' in tpu_kernels.kernels.softmax.lower(x).mlir_module()"
    ),
    "a jax_function call": "ok = np.allclose(add.jax_function()(x.numpy(), y.numpy()), (x + y).numpy())",
    "the program's JAX arrays first": (
        "jnp_first = jax.numpy.ones(3) + 1\nok = all(torch.equal(add(x, y), x + y) for _ in range(3))"
    ),
    "the program's JAX arrays first, the flag off before them": (
        'jax.config.update("jax_cpu_enable_async_dispatch", False)\n'
        "jnp_first = jax.numpy.ones(3) + 1\nok = all(torch.equal(add(x, y), x + y) for _ in range(3))"
    ),
    "an op call, the environment asking for asynchronous dispatch": (
        "ok = all(torch.equal(add(x, y), x + y) for _ in range(3))"
    ),
    "an op call, the environment asking for synchronous dispatch": (
        "ok = all(torch.equal(add(x, y), x + y) for _ in range(3))"
    ),
}
# the environment each case adds (JAX itself reads no variable for the flag: tpu_kernels does)
ENVIRONMENT = {
    "an op call, the environment asking for asynchronous dispatch": {cpu_client.ENV: "1"},
    "an op call, the environment asking for synchronous dispatch": {cpu_client.ENV: "0"},
}


pytestmark = pytest.mark.slow  # seven fresh processes importing torch, JAX and tpu_kernels


@pytest.fixture(scope="module")
def runs() -> dict[str, tuple[dict, str]]:
    """case -> (the figures its process printed, its stderr); every warning shown (-W always),
    so that a second note could not hide behind Python's once-per-place filter."""
    env = {
        **{k: v for k, v in os.environ.items() if k != cpu_client.ENV},
        "JAX_PLATFORMS": "cpu",
        "PYTHONPATH": str(ROOT),
        "TORCH_DEVICE_BACKEND_AUTOLOAD": "0",
    }
    procs = {
        case: subprocess.Popen(
            [sys.executable, "-W", "always", "-c", _PRELUDE + code + "\n" + _PROBE],
            cwd=ROOT,
            env={**env, **ENVIRONMENT.get(case, {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for case, code in CASES.items()
    }
    out = {}
    for case, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=600)
        assert proc.returncode == 0, f"{case}:\n{stderr[-3000:]}"
        out[case] = (json.loads(stdout.strip().splitlines()[-1]), stderr)
    return out


@pytest.mark.parametrize(
    "case",
    [
        "an op call",
        "a TPU lowering",
        "a jax_function call",
        "the program's JAX arrays first, the flag off before them",
        "an op call, the environment asking for synchronous dispatch",
    ],
)
def test_the_cpu_client_is_synchronous_when_tpu_kernels_or_the_program_asked_first(runs, case):
    figures, stderr = runs[case]
    assert figures["ok"]
    assert not figures["made_by_import"], "importing tpu_kernels made JAX's clients"
    assert figures["flag"] is False
    assert figures["ready_on_return"], "the client dispatched asynchronously"
    assert "asynchronous dispatch" not in stderr


def test_a_program_that_made_jax_arrays_first_gets_one_note_with_the_fix(runs):
    figures, stderr = runs["the program's JAX arrays first"]
    assert figures["ok"] and figures["flag"] is True  # too late to change: the calls still run, right
    assert not figures["ready_on_return"]  # the probe tells the two clients apart
    assert stderr.count(cpu_client.NOTE) == 1, stderr[-3000:]
    assert 'jax.config.update("jax_cpu_enable_async_dispatch", False)' in cpu_client.NOTE
    assert "<string>:" in stderr.split(cpu_client.NOTE)[0].splitlines()[-1]  # the program's line


def test_a_choice_the_environment_states_is_kept_without_a_note(runs):
    figures, stderr = runs["an op call, the environment asking for asynchronous dispatch"]
    assert figures["ok"] and not figures["made_by_import"]
    assert figures["flag"] is True and not figures["ready_on_return"]
    assert "asynchronous dispatch" not in stderr


@pytest.mark.parametrize(
    ("value", "want"),
    [("1", True), ("true", True), (" On ", True), ("yes", True), ("0", False), ("false", False),
     ("OFF", False), ("no", False), ("", None), (None, None)],
)
def test_the_environments_choice_is_read_by_tpu_kernels(monkeypatch, value, want):
    if value is None:
        monkeypatch.delenv(cpu_client.ENV, raising=False)
    else:
        monkeypatch.setenv(cpu_client.ENV, value)
    assert cpu_client.stated() is want


def test_a_value_it_cannot_read_is_refused_naming_the_variable(monkeypatch):
    monkeypatch.setenv(cpu_client.ENV, "sometimes")
    with pytest.raises(ValueError, match=f"{cpu_client.ENV}='sometimes'.*expected 1"):
        cpu_client.stated()


def test_jax_itself_reads_no_environment_variable_for_the_flag():
    """Why the variable is tpu_kernels': JAX's flag ignores JAX_CPU_ENABLE_ASYNC_DISPATCH (if a
    JAX release starts reading it, this fails, and ENV could become JAX's own again)."""
    code = "import jax; print(jax.config.read('jax_cpu_enable_async_dispatch'))"
    env = {**os.environ, "JAX_CPU_ENABLE_ASYNC_DISPATCH": "0", "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"
