"""scripts/gpu-check, as far as a machine without a GPU can check it: its arguments, the
preflight's answer where CUDA is missing, carried wheels, the selection of the CUDA tests (and
their skip here), the benchmark suite (run on the CPU at its small size) and the summary. The
GPU steps themselves need a CUDA machine (docs/devices.md, "Checking the CUDA path")."""

import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from tests.helpers import ROOT

SCRIPT = ROOT / "scripts" / "gpu-check"
NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")


def _load(name: str):
    spec = importlib.util.spec_from_file_location(
        f"gpu_check_{name}", ROOT / "scripts" / "gpu_check" / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPU_CHECK_", "TPU_KERNELS_REQUIRE"))}
    return {**env, "GPU_CHECK_PYTHON": sys.executable, **extra}


def gpu_check(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, env=_env(**env), cwd=ROOT, timeout=120
    )


def test_the_script_is_executable_and_valid_bash():
    assert os.access(SCRIPT, os.X_OK), "scripts/gpu-check must be executable (chmod +x)"
    result = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_help_documents_every_option_the_script_accepts():
    result = gpu_check("--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: scripts/gpu-check")
    accepted = set(re.findall(r"^\s+(--[a-z-]+)(?: \| [^)]*)?\)", SCRIPT.read_text(), re.M))
    accepted |= set(re.findall(r"^\s+-h \| (--help)\)", SCRIPT.read_text(), re.M))
    assert {"--python", "--wheels", "--out", "--timeout", "--no-tests", "--no-bench", "--help"} <= accepted
    for option in accepted:
        assert re.search(rf"^\s+(-h, )?{option}\b", result.stdout, re.M), f"--help does not document {option}"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--bogus"], "unknown argument '--bogus'"),
        (["--timeout"], "--timeout needs a value"),
        (["--timeout", "0"], "--timeout must be a whole number of seconds, got '0'"),
        (["--wheels", "/no/such/folder"], "--wheels '/no/such/folder' is not a folder"),
        (["--python", "/no/such/python3"], "no Python '/no/such/python3'"),
    ],
)
def test_usage_errors_exit_2_and_say_what_was_wrong(args, message):
    result = gpu_check(*args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert f"gpu-check: {message}" in result.stderr


@NO_CUDA
def test_without_a_gpu_the_preflight_stops_it_with_exit_3(tmp_path):
    # run from another folder with a relative --out: the log lands there, not in the checkout
    result = subprocess.run(
        [str(SCRIPT), "--out", "out"], capture_output=True, text=True, env=_env(), cwd=tmp_path, timeout=120
    )
    assert result.returncode == 3, (result.stdout, result.stderr)
    assert "gpu-check: preflight failed (exit 3): no GPU to check: torch sees no CUDA device" in result.stderr
    assert "the CUDA tests and the benchmark did not run" in result.stderr
    # the versions came first, the checkout on the path, JAX asked for its CUDA backend
    assert re.search(r"^  python 3\.\d+", result.stdout, re.M)
    assert f"  torch {importlib.metadata.version('torch')}" in result.stdout
    assert f"tpu_kernels from {ROOT / 'tpu_kernels'}" in result.stdout
    assert "JAX_PLATFORMS=cuda,cpu" in result.stdout
    assert (tmp_path / "out" / "preflight.log").read_text().startswith("  python 3.")
    assert not (tmp_path / "out" / "tests.xml").exists()  # pytest never started


@NO_CUDA
def test_past_the_preflight_a_missing_gpu_fails_the_tests_and_the_benchmark(tmp_path):
    """The steps after the preflight, run here through a Python that answers the preflight with
    success and runs everything else: the CUDA tests are a collection error (not skips), the
    benchmark refuses --device cuda, and the summary and the exit status say FAILED."""
    python = tmp_path / "python"
    python.write_text(
        "#!/usr/bin/env bash\n"
        'if [ "$1" = scripts/gpu_check/preflight.py ]; then echo "  (preflight passed)"; exit 0; fi\n'
        f'exec {sys.executable} "$@"\n'
    )
    python.chmod(0o755)
    out = tmp_path / "out"
    result = subprocess.run(
        [str(SCRIPT), "--out", str(out)],
        capture_output=True,
        text=True,
        env=_env(GPU_CHECK_PYTHON=str(python)),
        cwd=ROOT,
        timeout=300,
    )
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    assert "TPU_KERNELS_REQUIRE_CUDA=1 but torch sees no CUDA device" in (out / "tests.log").read_text()
    assert "--device cuda, but torch sees no CUDA device" in (out / "bench.log").read_text()
    summary = (out / "summary.txt").read_text()
    assert "(preflight passed)" in summary
    assert re.search(r"^tests: 0 passed, 0 failed, 1 errors", summary, re.M), summary
    assert "benchmark: not run (no report)" in summary
    assert summary.rstrip().endswith("gpu-check: FAILED (see tests.log, bench.log)")


def _wheel(folder: Path, name: str, version: str) -> Path:
    """A minimal pure-Python wheel holding the module `name`."""
    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": "VALUE = 42\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{f},,\n" for f in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for f, text in {**files, f"{info}/RECORD": record}.items():
            z.writestr(f, text)
    return path


@NO_CUDA
def test_carried_wheels_are_installed_and_found_by_the_preflight(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "gpucheck_probe", "0.3")
    result = gpu_check("--wheels", str(wheels), "--out", str(tmp_path / "out"))
    assert "carried wheels, installed into" in result.stdout, result.stderr
    assert re.search(r"carried: gpucheck_probe 0\.3 in \S+/site", result.stdout), result.stdout
    assert result.returncode == 3  # then the missing GPU, as without wheels


def test_a_folder_without_wheels_is_a_usage_error_before_anything_is_written(tmp_path):
    results = ROOT / "gpu-check-results"  # the default --out's parent
    before = set(results.iterdir()) if results.exists() else set()
    result = subprocess.run(
        [str(SCRIPT), "--wheels", "."], capture_output=True, text=True, env=_env(), cwd=tmp_path, timeout=60
    )
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert f"gpu-check: --wheels '{tmp_path}' holds no .whl files" in result.stderr
    assert (set(results.iterdir()) if results.exists() else set()) == before  # no output folder made


def test_the_preflight_names_a_missing_jax_cuda_backend(monkeypatch, capsys):
    """torch with a GPU but JAX without its CUDA backend (JAX_PLATFORMS=cpu here stands in for
    a CPU-only jaxlib): the answer names JAX, and the exit status is the no-GPU one."""
    from tpu_kernels.runtime.devices import cuda

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert cuda.unavailable_reason().startswith("JAX has no CUDA backend: jax.devices('cuda') raised")
    preflight = _load("preflight")
    assert preflight.check(smoke=False) == preflight.EXIT_NO_GPU
    assert "gpu-check: no GPU to check: JAX has no CUDA backend" in capsys.readouterr().err


def test_the_preflight_shows_versions_beside_the_lock(tmp_path, monkeypatch):
    preflight = _load("preflight")
    lock = tmp_path / "lock.txt"
    lock.write_text("torch==0.0.1 \\\n    --hash=sha256:00\njax==0.12.0.1\nml-dtypes==0.6.0\n# comment\n")
    pins = preflight.pinned(lock)
    assert pins == {"torch": "0.0.1", "jax": "0.12.0.1", "ml-dtypes": "0.6.0"}
    monkeypatch.setattr(preflight, "pinned", lambda: pins)
    lines = preflight.version_lines()
    assert f"torch {importlib.metadata.version('torch')} (CI: 0.0.1)" in lines
    assert any(line.startswith("jax-cuda13-plugin ") for line in lines)


@NO_CUDA
def test_the_cuda_tests_are_selected_and_skip_here_with_the_reason(tmp_path):
    junit = tmp_path / "tests.xml"
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs", "-m", "cuda", "tests/cuda"]
    result = subprocess.run(
        [*cmd, "--junitxml", str(junit)], capture_output=True, text=True, cwd=ROOT, env=_env(), timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    skipped = int(re.search(r"(\d+) skipped", result.stdout).group(1))
    assert skipped >= 15 and "passed" not in result.stdout and "deselected" not in result.stdout
    assert "torch sees no CUDA device" in result.stdout
    # the summary reads pytest's own report of that run
    lines = _load("summary").test_lines(junit)
    assert lines[0] == f"tests: 0 passed, 0 failed, 0 errors, {skipped} skipped (of {skipped})"
    # under scripts/gpu-check the same condition is an error, not a pass made of skips
    strict = subprocess.run(
        cmd, capture_output=True, text=True, cwd=ROOT, env=_env(TPU_KERNELS_REQUIRE_CUDA="1"), timeout=120
    )
    assert strict.returncode != 0
    assert "TPU_KERNELS_REQUIRE_CUDA=1 but torch sees no CUDA device" in strict.stdout


def test_every_cuda_test_module_is_marked_and_guarded():
    modules = sorted((ROOT / "tests" / "cuda").glob("test_*.py"))
    assert modules
    for path in modules:
        text = path.read_text()
        assert "pytestmark = marks()" in text, (
            f"{path.name} lacks `pytestmark = marks()` (tests/cuda/__init__.py)"
        )


def test_the_summary_lists_failures_and_benchmark_figures(tmp_path):
    summary = _load("summary")
    junit = tmp_path / "t.xml"
    junit.write_text(
        '<testsuites><testsuite tests="3" failures="1" errors="0" skipped="1">'
        '<testcase name="test_ok"/>'
        '<testcase name="test_bad"><failure message="AssertionError: 3 != 4">trace</failure></testcase>'
        '<testcase name="test_helion"><skipped message="Helion is not installed"/></testcase>'
        "</testsuite></testsuites>"
    )
    assert summary.test_lines(junit) == [
        "tests: 1 passed, 1 failed, 0 errors, 1 skipped (of 3)",
        "  failure: test_bad: AssertionError: 3 != 4",
        "  skipped: test_helion: Helion is not installed",
    ]
    assert summary.test_lines(tmp_path / "missing.xml") == ["tests: not run (no JUnit report)"]
    assert summary.bench_lines(None) == ["benchmark: not run (no report)"]


@pytest.mark.slow  # about 12 s of CPU time, 35 s of wall time on the shared 2-core machine
def test_the_benchmark_suite_runs_and_is_summarised(tmp_path):
    """The suite scripts/gpu-check times on cuda, here on the CPU at its small size (256):
    the op is right and timed beside torch and the bare JAX call."""
    out = tmp_path / "bench"
    result = subprocess.run(
        [sys.executable, "-m", "tpu_kernels", "bench", "scripts/gpu_check/cuda_suite.py", "--quick"]
        + ["--device", "cpu", "--filter", "softmax", "--rounds", "1", "--min-sample-ms", "1", "--no-plots"]
        + ["--out", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_env(HELION_DISALLOW_AUTOTUNING="1"),
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    points = [r["point_id"] for r in report["results"]]
    assert points == ["shape=256x256,dtype=float32", "shape=256x256,dtype=bfloat16"]
    for res in report["results"]:
        cands = {c["name"]: c for c in res["candidates"]}
        assert {"tpu_kernels", "torch", "jax"} <= set(cands)
        assert cands["tpu_kernels"]["check"]["passed"] and cands["tpu_kernels"]["time"]["median"] > 0
    lines = _load("summary").bench_lines(out / "report.json")
    assert lines[0].startswith("benchmark on ") and "(cpu)" in lines[0]
    assert re.match(r"  softmax_xla shape=256x256,dtype=float32: tpu_kernels \S+ \w+, torch", lines[1])
    assert "tpu_kernels/jax" in lines[1] and "GB/s" in lines[1]


def test_the_wheels_to_carry_are_pinned_and_named_in_the_docs():
    lines = (ROOT / "scripts" / "gpu_check" / "wheels.txt").read_text().splitlines()
    pins = [line for line in lines if line.strip() and not line.startswith("#")]
    assert pins and all(re.fullmatch(r"[A-Za-z0-9_.\-]+==[0-9][\w.]*", p) for p in pins), pins
    docs = (ROOT / "docs" / "devices.md").read_text()
    for pin in pins:
        name, version = pin.split("==")
        assert f"{name} {version}" in docs, f"docs/devices.md does not name {name} {version}"
