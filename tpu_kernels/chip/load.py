"""The JAX halves of the shipped kernels and of the Pallas templates, imported without torch.

A TPU host may have JAX and no torch (the v5e development machine: Python 3.11, JAX 0.10.2,
no torch installable). Each family folder's `pallas.py` (kernel, wrapper, its block `Config`;
matmul's `blocks.py` with its cost model), `jax_reference.py`, `shapes.py` and `chip.py` (its
points in the runner's grid) import only JAX, NumPy and torch-free parts of tpu_kernels; the
folder's `__init__.py` registers the torch op and so imports torch. Where torch cannot be
imported, `family()` puts bare package modules for `tpu_kernels.kernels` and the family folder
into `sys.modules` (their `__init__`s are not run) and imports the four modules from them. With
torch present the packages import as usual.

A family is a folder with a `pallas.py` in any folder of the `tpu_kernels.kernels` package's
path (`families()`): the shipped ones, and any folder a user's code appends to that path.

A Pallas template (`templates/<name>/pallas/{{name}}/pallas.py.tmpl`) is rendered in memory
with the template's placeholders and imported as a module of its own (`template()`).
"""

from __future__ import annotations

import importlib.util
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import tpu_kernels
from tpu_kernels import template_files, wiring

PACKAGE = Path(tpu_kernels.__file__).resolve().parent
KERNELS = PACKAGE / "kernels"


def torch_available() -> bool:
    """Whether `import torch` can succeed here (a `sys.modules["torch"] = None` block counts)."""
    if "torch" in sys.modules:
        return sys.modules["torch"] is not None
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


def _bare_package(name: str, path: Path) -> None:
    """`name` as a package whose `__init__` is not run: its submodules import from `path`."""
    if name in sys.modules:
        return
    module = types.ModuleType(name, f"{name} (bare: loaded without torch by tpu_kernels.chip.load)")
    module.__path__ = [str(path)]
    module.__package__ = name
    sys.modules[name] = module


@dataclass(frozen=True)
class JaxHalf:
    """A family's torch-free modules."""

    name: str
    pallas: types.ModuleType
    jax_reference: types.ModuleType
    shapes: types.ModuleType
    chip: types.ModuleType  # SECTION, grid() and points(): the family's points in the runner


def _roots() -> list[Path]:
    """The folders of the `tpu_kernels.kernels` package's path (its own folder first)."""
    package = sys.modules.get("tpu_kernels.kernels")
    extra = [Path(p) for p in getattr(package, "__path__", [])]
    return [KERNELS, *(p for p in extra if p.resolve() != KERNELS)]


def families() -> list[str]:
    """The families: folders with a `pallas.py` in the `tpu_kernels.kernels` package's path."""
    return sorted({p.parent.name for root in _roots() for p in root.glob("*/pallas.py")})


def shared(name: str) -> types.ModuleType:
    """A torch-free module the families share (`_blocks`, `_vmem`), importing no torch when
    torch is absent."""
    if not torch_available():
        _bare_package("tpu_kernels.kernels", KERNELS)
    return wiring.registered(f"tpu_kernels.kernels.{name}")


def family(name: str) -> JaxHalf:
    """The family `name`'s pallas, jax_reference, shapes and chip modules, importing no torch
    when torch is absent."""
    if name not in families():
        raise ValueError(f"tpu_kernels.chip: no shipped kernel family {name!r}; there are {families()}.")
    package = f"tpu_kernels.kernels.{name}"
    if not torch_available():
        _bare_package("tpu_kernels.kernels", KERNELS)
        _bare_package(package, next(r / name for r in _roots() if (r / name / "pallas.py").is_file()))
    modules = [wiring.registered(f"{package}.{m}") for m in ("pallas", "jax_reference", "shapes", "chip")]
    return JaxHalf(name, *modules)


def template(name: str, *, op: str | None = None) -> types.ModuleType:
    """The Pallas template `name`'s kernel module, rendered for op name `op` (default `name`)
    without writing files. Placeholders as `tpu-kernels new` fills them."""
    source = template_files.templates_dir() / name / "pallas" / "{{name}}" / "pallas.py.tmpl"
    if not source.is_file():
        raise ValueError(f"tpu_kernels.chip: no Pallas template {name!r} at {source}.")
    op = op or name
    values = {"name": op, "namespace": "chip", "op": f"chip::{op}", "template": name, "backend": "pallas"}
    text = template_files.render(source.read_text(), values, str(source))
    module_name = f"tpu_kernels_chip_templates.{op}"
    module = types.ModuleType(module_name)
    module.__file__ = str(source)
    exec(compile(text, str(source), "exec"), module.__dict__)
    sys.modules[module_name] = module
    return module


def template_names() -> list[str]:
    """The templates that have a Pallas variant."""
    return sorted(p.parent.parent.name for p in template_files.templates_dir().glob("*/pallas/{{name}}"))


__all__ = ["JaxHalf", "families", "family", "shared", "template", "template_names", "torch_available"]
