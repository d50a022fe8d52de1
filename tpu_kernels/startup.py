"""A quiet start on a machine without a TPU: what `import tpu_kernels` sets before torch or JAX load.

With torch-tpu and libtpu installed, two things probe for a TPU in every process, and on a
machine without one each prints start-up errors to stderr (and costs seconds):

- `import torch` auto-loads torch_tpu (torch's device-backend autoload), which loads libtpu:
  a tcmalloc warning and libtpu's `GetPjrtApi was found for TPU` log line;
- JAX's first use of a backend tries every registered platform, "tpu" included, whose
  libtpu fails: `Failed to find host bounds`, `TPU_WORKER_HOSTNAMES`, `No jellyfish device
  found` (by machine).

`quiet_start()` runs at `import tpu_kernels` (every entry point imports the package first:
the `tpu-kernels` command, `python -m tpu_kernels...`, a user's `from tpu_kernels import ...`)
and, only when this machine has no TPU device (`/dev/accel*`, `/dev/vfio/<n>`), sets
defaults that an explicit setting overrides, in `os.environ` so that spawned worker
processes inherit them:

| variable | default | when | effect |
|---|---|---|---|
| `TORCH_DEVICE_BACKEND_AUTOLOAD` | `0` | torch_tpu installed, torch not imported yet | torch does not auto-load torch_tpu (tpu_kernels imports it itself for a TPU tensor) |
| `JAX_PLATFORMS` | `cpu` | libtpu installed, no GPU device (`/dev/nvidia<n>`, `/dev/kfd`), JAX not imported yet | JAX does not probe for a TPU; the TPU lowering check exports for "tpu" without a TPU backend |

torch_tpu imported on purpose (`devices.tpu.torch_tpu_pallas`, a TPU tensor's first call)
is quiet too: JAX is imported first (libtpu's log line then stays out of stderr), and its
tcmalloc advice, meant for TPU hosts, is filtered there.

Where a TPU device exists nothing is set: torch_tpu and JAX start as they always do, logs
included. A process that imported torch or JAX before tpu_kernels has already probed (or
decided); set the variables before Python starts there (docs/devices.md).
"""

from __future__ import annotations

import glob
import importlib.util
import os
import sys
from collections.abc import Callable, MutableMapping

TPU_DEVICES = ("/dev/accel*", "/dev/vfio/[0-9]*")
GPU_DEVICES = ("/dev/nvidia[0-9]*", "/dev/kfd")


def _present(patterns: tuple[str, ...]) -> bool:
    return any(glob.glob(p) for p in patterns)


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def defaults(
    *,
    has_tpu: bool,
    has_gpu: bool,
    installed: Callable[[str], bool],
    imported: Callable[[str], bool],
) -> dict[str, str]:
    """The environment defaults for a quiet start (see the module docstring), given what the
    machine has, which packages are installed and which are already imported."""
    if has_tpu:
        return {}
    out = {}
    if installed("torch_tpu") and not imported("torch"):
        out["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    if installed("libtpu") and not has_gpu and not imported("jax"):
        out["JAX_PLATFORMS"] = "cpu"
    return out


def quiet_start(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Set the defaults for this machine where the variable is not set yet; returns those set."""
    environ = os.environ if environ is None else environ
    wanted = defaults(
        has_tpu=_present(TPU_DEVICES),
        has_gpu=_present(GPU_DEVICES),
        installed=_installed,
        imported=lambda name: name in sys.modules,
    )
    applied = {k: v for k, v in wanted.items() if k not in environ}
    environ.update(applied)
    return applied


def has_tpu_device() -> bool:
    """Whether this machine shows a TPU device (`/dev/accel*`, `/dev/vfio/<n>`)."""
    return _present(TPU_DEVICES)


__all__ = ["GPU_DEVICES", "TPU_DEVICES", "defaults", "has_tpu_device", "quiet_start"]
