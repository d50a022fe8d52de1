"""Start-up: `import tpu_kernels` is lazy, and on a machine without a TPU every entry point
(a user's program, the command, spawned workers, torch_tpu imported on purpose) keeps
torch_tpu's and libtpu's start-up noise away (`tpu_kernels.startup`)."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tpu_kernels import startup

ROOT = Path(__file__).resolve().parents[1]


def _python(code_or_args: list[str], cwd: Path, env_drop=("TORCH_DEVICE_BACKEND_AUTOLOAD", "JAX_PLATFORMS")):
    env = {k: v for k, v in os.environ.items() if k not in env_drop}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, *code_or_args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_import_tpu_kernels_imports_neither_torch_nor_jax_until_used(tmp_path):
    out = _python(
        [
            "-c",
            "import sys, tpu_kernels\n"
            "print('torch' in sys.modules, 'jax' in sys.modules)\n"
            "from tpu_kernels import tpu_kernel, interpret_mode\n"
            "print('torch' in sys.modules, callable(tpu_kernel), set(tpu_kernels.__all__) == set(tpu_kernels._EXPORTS))",
        ],
        tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False", "True", "True", "True"]


NOISE = (
    "tcmalloc",
    "libtpu",
    "pjrt_api",
    "TPU_WORKER_HOSTNAMES",
    "TPU_ACCELERATOR_TYPE",
    "Failed to find host bounds",
    "jellyfish",
    "absl::InitializeLog",
    "InitGoogle",
)

# A user's program, as plain as it gets: no variable set, `import tpu_kernels` first. It
# calls an op, lowers one for the TPU, imports torch_tpu on purpose (what a TPU tensor's
# first call does) and spawns a worker process that imports torch and starts JAX.
USER_PROGRAM = """
import tpu_kernels
import torch
import torch.multiprocessing as mp

from tpu_kernels import testing
from tpu_kernels.runtime.devices import tpu
from tpu_kernels.kernels import softmax


def worker(rank):
    import jax
    import torch

    print("worker", rank, jax.devices()[0].platform, torch.ones(2).sum().item(), flush=True)


if __name__ == "__main__":
    print("op", softmax(torch.randn(4, 8)).sum().item(), flush=True)
    testing.assert_lowers_for_tpu(softmax)
    tpu.torch_tpu_pallas()
    mp.spawn(worker, nprocs=1)
    print("done", flush=True)
"""

PROBING = ("TORCH_DEVICE_BACKEND_AUTOLOAD", "JAX_PLATFORMS", "TF_CPP_MIN_LOG_LEVEL")  # none set
NO_TPU = pytest.mark.skipif(
    startup.has_tpu_device(), reason="a TPU machine: torch_tpu and libtpu start as they do, logs included"
)
TPU_STACK = pytest.mark.skipif(
    importlib.util.find_spec("torch_tpu") is None or importlib.util.find_spec("libtpu") is None,
    reason="torch-tpu and libtpu not installed: nothing probes for a TPU",
)


def _assert_quiet(out: subprocess.CompletedProcess) -> None:
    text = out.stdout + out.stderr
    for noise in NOISE:
        assert noise not in text, f"{noise!r} in:\n{text}"


@NO_TPU
@TPU_STACK
def test_a_plain_program_without_a_tpu_starts_quietly_in_every_process(tmp_path):
    program = tmp_path / "user_program.py"
    program.write_text(USER_PROGRAM)
    out = _python([str(program)], tmp_path, env_drop=PROBING)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "worker 0 cpu 2.0" in out.stdout and "done" in out.stdout, out.stdout + out.stderr
    _assert_quiet(out)


@NO_TPU
@TPU_STACK
@pytest.mark.parametrize("entry", [["-m", "tpu_kernels"], ["-m", "tpu_kernels.cli"]])
def test_the_command_without_a_tpu_starts_quietly(tmp_path, entry):
    # `check` starts JAX (the lowering), so JAX's TPU probe would print here too
    out = _python([*entry, "check", "--filter", "tpu_kernels::softmax$"], tmp_path, env_drop=PROBING)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 ops: 1 ok" in out.stdout, out.stdout
    _assert_quiet(out)


def test_the_defaults_leave_a_tpu_machine_and_explicit_settings_alone():
    def installed(*names):
        return lambda name: name in names

    nothing = lambda name: False  # noqa: E731
    full = installed("torch_tpu", "libtpu")
    quiet = {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "JAX_PLATFORMS": "cpu"}
    assert startup.defaults(has_tpu=False, has_gpu=False, installed=full, imported=nothing) == quiet
    # a TPU machine: loud, as torch_tpu and libtpu start there
    assert startup.defaults(has_tpu=True, has_gpu=False, installed=full, imported=nothing) == {}
    # a GPU machine keeps JAX's own platform choice (its CUDA backend)
    assert "JAX_PLATFORMS" not in startup.defaults(
        has_tpu=False, has_gpu=True, installed=full, imported=nothing
    )
    # what is already imported has already probed or decided
    assert (
        startup.defaults(has_tpu=False, has_gpu=False, installed=full, imported=installed("torch", "jax"))
        == {}
    )
    # nothing that probes is installed: nothing to quiet
    assert startup.defaults(has_tpu=False, has_gpu=False, installed=nothing, imported=nothing) == {}
    environ = {"JAX_PLATFORMS": "cuda", "TORCH_DEVICE_BACKEND_AUTOLOAD": "1"}
    assert startup.quiet_start(environ) == {} and environ == {
        "JAX_PLATFORMS": "cuda",
        "TORCH_DEVICE_BACKEND_AUTOLOAD": "1",
    }


def test_the_public_names_are_listed_once_and_each_resolves_where_exports_says():
    """`__all__`, `_EXPORTS` and the TYPE_CHECKING imports (what type checkers and IDEs see) are
    three hand lists of the same names: a name listed twice, or missing from one, fails here."""
    import ast
    import importlib

    import tpu_kernels

    assert len(tpu_kernels.__all__) == len(set(tpu_kernels.__all__)), sorted(
        n for n in tpu_kernels.__all__ if tpu_kernels.__all__.count(n) > 1
    )
    assert set(tpu_kernels.__all__) == set(tpu_kernels._EXPORTS)
    for name, module in tpu_kernels._EXPORTS.items():
        assert getattr(tpu_kernels, name) is getattr(importlib.import_module(module), name), name
    tree = ast.parse((ROOT / "tpu_kernels" / "__init__.py").read_text())
    (block,) = [n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"]
    typed = {(i.module, a.name) for i in ast.walk(block) if isinstance(i, ast.ImportFrom) for a in i.names}
    assert typed == {(module, name) for name, module in tpu_kernels._EXPORTS.items()}
