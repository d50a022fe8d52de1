"""Start-up: `import tpu_kernels` is lazy, and the command keeps torch_tpu's start-up noise away
on a machine without a TPU."""

import glob
import os
import subprocess
import sys
from pathlib import Path

import pytest

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


@pytest.mark.skipif(
    bool(glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*")),
    reason="a TPU machine: autoload is wanted",
)
def test_the_command_prints_no_torch_tpu_noise_without_a_tpu(tmp_path):
    out = _python(["-m", "tpu_kernels.cli", "bench", "kernels", "--quick", "--filter", "no-match"], tmp_path)
    assert out.returncode == 2, out.stderr  # nothing selected
    text = out.stdout + out.stderr
    for noise in ("tcmalloc", "libtpu", "pjrt_api", "TPU_WORKER_HOSTNAMES", "absl::InitializeLog"):
        assert noise not in text, text
    assert "--filter 'no-match' matched none of" in text.strip().splitlines()[-1]


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
