"""scripts/gpu-check's first step: what this machine has, and can CUDA tensors reach JAX's GPU.

    python scripts/gpu_check/preflight.py

Prints the Python and package versions (beside the versions requirements/lock.txt pins,
which CI tests), then checks in order, stopping at the first that fails:

0. each carried wheel (GPU_CHECK_CARRIED: names) is found on the path             -> exit 4
1. torch sees a CUDA device, and JAX has a CUDA backend (`jax.devices("cuda")`)  -> exit 3
2. tpu_kernels imports (and from where); names the private APIs that fell back  -> exit 4
3. an op with a JAX body, called on a CUDA tensor, returns the right values     -> exit 4

Exit 0: the CUDA tests and the benchmark can start. Needs no network.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import re
import sys
from pathlib import Path

EXIT_NO_GPU = 3
EXIT_BROKEN = 4

ROOT = Path(__file__).resolve().parents[2]

# distributions whose versions matter to the CUDA path (absent ones print "absent")
PACKAGES = (
    "torch",
    "jax",
    "jaxlib",
    "jax-cuda13-plugin",
    "jax-cuda13-pjrt",
    "jax-cuda12-plugin",
    "jax-cuda12-pjrt",
    "triton",
    "numpy",
    "ml_dtypes",
    "helion",
    "tokamax",
    "rich",
    "matplotlib",
    "pytest",
    "pytest-timeout",
)


def installed(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def pinned(lock: Path = ROOT / "requirements" / "lock.txt") -> dict[str, str]:
    """name -> version of each `name==version` line of the lock (CI's versions)."""
    if not lock.exists():
        return {}
    pins = {}
    for line in lock.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s;\\]+)", line)
        if m:
            pins[m.group(1).lower().replace("_", "-")] = m.group(2)
    return pins


def version_lines() -> list[str]:
    pins = pinned()
    lines = [f"python {platform.python_version()} at {sys.executable}"]
    for name in PACKAGES:
        have = installed(name) or "absent"
        want = pins.get(name.lower().replace("_", "-"))
        lines.append(f"{name} {have}" + (f" (CI: {want})" if want and want != have else ""))
    return lines


def _fail(code: int, message: str) -> int:
    print(f"gpu-check: {message}", file=sys.stderr)
    return code


def check(smoke: bool = True) -> int:
    """The checks of this module's docstring; prints as it goes and returns the exit status."""
    for line in version_lines():
        print(f"  {line}")
    print(f"  JAX_PLATFORMS={os.environ.get('JAX_PLATFORMS', '(unset)')}")
    for name in os.environ.get("GPU_CHECK_CARRIED", "").split():
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            return _fail(EXIT_BROKEN, f"the carried wheel {name!r} was installed but Python does not find it")
        print(f"  carried: {name} {dist.version} in {dist.locate_file('')}")
    try:
        from tpu_kernels.runtime.devices import cuda
    except Exception as e:  # any import failure is this machine's answer; say it whole
        return _fail(EXIT_BROKEN, f"tpu_kernels does not import here: {type(e).__name__}: {e}")
    import tpu_kernels

    print(f"  tpu_kernels from {Path(tpu_kernels.__file__).parent}")
    import torch

    print(f"  torch CUDA runtime {torch.version.cuda}")
    why = cuda.unavailable_reason()
    if why is not None:
        return _fail(EXIT_NO_GPU, f"no GPU to check: {why}.")
    import jax

    print(f"  torch device: {torch.cuda.get_device_name()} (of {torch.cuda.device_count()})")
    print(f"  jax devices('cuda'): {jax.devices('cuda')}")
    from tpu_kernels import _compat

    fell_back = sorted(name for name, ok in _compat.live().items() if not ok)
    print(
        "  private APIs (tpu_kernels/_compat.py): "
        + (f"missing here, fallback or error instead: {', '.join(fell_back)}" if fell_back else "all resolve")
    )
    if smoke:
        problem = smoke_call()
        if problem:
            return _fail(EXIT_BROKEN, problem)
        print("  smoke call: a JAX-bodied op on a CUDA tensor returned the right values")
    return 0


def smoke_call() -> str | None:
    """One op with a JAX body on a CUDA tensor; None if its result is right, else what was wrong."""
    import jax.numpy as jnp
    import torch

    from tpu_kernels import tpu_kernel

    @tpu_kernel("gpu_check::smoke")
    def smoke(x: torch.Tensor) -> torch.Tensor:
        return jnp.sqrt(x) + 1

    x = torch.arange(1, 1025, dtype=torch.float32, device="cuda")
    try:
        out = smoke(x)
    except Exception as e:
        return f"the smoke call failed: {type(e).__name__}: {e}"
    expected = torch.arange(1, 1025, dtype=torch.float64).sqrt() + 1
    if out.device.type != "cuda":
        return f"the smoke call's result is on {out.device}, not cuda"
    if not torch.allclose(out.cpu().double(), expected, rtol=1e-6, atol=1e-6):
        return f"the smoke call's values are wrong: {out[:4].tolist()} for {expected[:4].tolist()}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-smoke", action="store_true", help="skip the smoke call (step 3)")
    args = parser.parse_args(argv)
    return check(smoke=not args.no_smoke)


if __name__ == "__main__":
    sys.exit(main())
