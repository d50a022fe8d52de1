"""The wiring the imports do not show, in one place: the package's modules imported by name
at run time, and the hooks a higher layer installs into a lower one.

Most of the package is wired by plain imports, and docs/architecture.md draws them. Three
kinds of link cannot be, and each goes through this module (tests/test_wiring.py holds the
package to it: no other module of the package imports one of its own modules by name):

- **Late imports** (`load`): a module named in `LATE`, imported when first needed rather
  than at import, each for the reason the table gives.
- **Discovery** (`discover`): a folder of families whose subfolders are found, not named
  (`DISCOVERED`): adding a family adds a folder and no line elsewhere.
- **Registries** (`registered`): a module a registry names, which whoever registered chose: a
  kernel family's `reference`/`shapes`/`helion` modules (kernels/registry.py, a Tokamax
  family's parts (tokamax/registry.py), the chip runner's torch-free halves (chip/load.py), a
  kernel language's module (runtime/sources). The registry is where to read them.
- **Hooks** (`hook`, `install`): a function of a higher layer that a lower layer calls. The
  lower layer may not import the higher one (tests/test_layers.py), so `hook(name)` imports
  the module `HOOKS` names, which installs its functions when imported (`install`).

Modules outside the package imported by name stay where they are needed, because their
names come from the caller or from another package: a pickled op's defining module
(`op._registered_op`), the module `tpu-kernels tune` and `tpu-kernels check` are pointed
at (`commands/tune.py`, `lowering_check/modules.py`), Hugging Face model classes
(`integrations/transformers/families.py`) and Tokamax's api modules
(`tokamax/implementation.py`). `_compat.py` resolves private APIs by name, as its own
table says.

This module imports nothing of the package, so any layer may use it.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

LATE: dict[str, str] = {
    # the public facade: `import tpu_kernels` stays light (no torch, no JAX) until a name is used
    "tpu_kernels.op": "the facade's tpu_kernel, KernelOp and registered_ops (tpu_kernels/__init__.py)",
    "tpu_kernels.errors": "the facade's error classes",
    "tpu_kernels.autotuner": "the facade's autotune, and the provider of the tuning hooks (HOOKS)",
    "tpu_kernels.tunables": "the facade's TuningNote",
    "tpu_kernels.dispatch.buckets": "the facade's bucket helpers",
    "tpu_kernels.runtime.cache": "the facade's CacheInfo",
    "tpu_kernels.runtime.interpret": "the facade's interpret-mode switches",
    "tpu_kernels.runtime.sources.helion": "the facade's Helion CPU-mode switches",
    "tpu_kernels.sharding": "the facade's sharding rules",
    "tpu_kernels.verification.checked_mode": "the facade's checked mode",
    "tpu_kernels.verification.tolerance": "the facade's Reference",
    # the built-in devices: imported on the first read of the device registry, after any device
    # registered from outside the package (runtime/devices/__init__.py)
    "tpu_kernels.runtime.devices.cpu": "the CPU device, registered on the device registry's first read",
    "tpu_kernels.runtime.devices.cuda": "the CUDA device, registered on the device registry's first read",
    "tpu_kernels.runtime.devices.tpu": "the TPU device, registered on the device registry's first read",
}
"""Module -> why it is imported late."""

DISCOVERED: dict[str, str] = {
    "tpu_kernels.kernels": "the shipped kernel families: every subfolder (kernels/registry.py)",
    "tpu_kernels.tokamax": "the Tokamax families: every subfolder with an op.py (tokamax/registry.py)",
}
"""Package -> what its subfolders are. `discover` imports them; `part` imports a module of one."""

HOOKS: dict[str, tuple[str, str]] = {
    "online_tuner": (
        "tpu_kernels.autotuner",
        "tunes one call on the attached chip (TPU_KERNELS_AUTOTUNE=1): called by tunables/lookup.py",
    ),
    "borrow_check": (
        "tpu_kernels.autotuner",
        "runs a call with a config borrowed from the nearest bucket and says why it is not right "
        '("" when it is): called by tunables/lookup.py',
    ),
}
"""Hook -> (the module that installs it when imported, what it does and who calls it)."""

_INSTALLED: dict[str, Callable[..., Any]] = {}


def load(module: str) -> ModuleType:
    """The module `module`, which `LATE` must name (a name it lacks is a wiring nobody wrote
    down: say why it is late there first)."""
    if module not in LATE:
        raise KeyError(f"tpu_kernels.wiring: {module!r} is not in LATE; add it with the reason it is imported late.")
    return importlib.import_module(module)


def discover(package: str, path: list[str] | Any, *, marker: str | None = None) -> list[ModuleType]:
    """Import every subfolder of `package` (one of `DISCOVERED`, at `path`, its `__path__`), in
    alphabetical order; with `marker`, only those holding a file of that name."""
    if package not in DISCOVERED:
        raise KeyError(f"tpu_kernels.wiring: {package!r} is not in DISCOVERED; add it with what its subfolders are.")
    found = []
    for info in sorted(pkgutil.iter_modules(path), key=lambda m: m.name):
        if info.ispkg and (marker is None or (Path(list(path)[0]) / info.name / marker).is_file()):
            found.append(importlib.import_module(f"{package}.{info.name}"))
    return found


def registered(module: str) -> ModuleType:
    """A module a registry names (a family's part, a language's module): the package that
    registered chose it, in this package or outside it."""
    return importlib.import_module(module)


def install(name: str, fn: Callable[..., Any]) -> None:
    """Install the hook `name` (the module `HOOKS` names does, when it is imported)."""
    if name not in HOOKS:
        raise KeyError(f"tpu_kernels.wiring: no hook {name!r}; HOOKS names {sorted(HOOKS)}.")
    _INSTALLED[name] = fn


def hook(name: str) -> Callable[..., Any]:
    """The hook `name`, importing the module that installs it the first time."""
    fn = _INSTALLED.get(name)
    if fn is None:
        module = HOOKS[name][0]
        importlib.import_module(module)
        fn = _INSTALLED.get(name)
        if fn is None:
            raise RuntimeError(f"tpu_kernels.wiring: importing {module} did not install the hook {name!r}.")
    return fn


__all__ = ["DISCOVERED", "HOOKS", "LATE", "discover", "hook", "install", "load", "registered"]
