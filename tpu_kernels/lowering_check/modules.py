"""Which ops a module defines: import it (a module name, a .py file or a package folder)
and collect the ops it registered, their backward ops included."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from tpu_kernels.op import registered_ops

if TYPE_CHECKING:
    from tpu_kernels.op import KernelOp

DEFAULT_MODULE = "tpu_kernels.kernels"


def import_target(target: str) -> ModuleType:
    """Import a module by name (the current directory is searched too, as `python -m`
    does), a `.py` file, or a package folder."""
    path = Path(target)
    if path.suffix == ".py" and path.is_file():
        return _import_file(path.resolve())
    if path.is_dir() and (path / "__init__.py").is_file():
        return _import_package(path.resolve())
    if str(Path.cwd()) not in sys.path and "" not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as e:
        if e.name and target.startswith(e.name):
            raise ModuleNotFoundError(
                f"no module, .py file or package folder named {target!r} (module names are searched "
                "in the current directory and on sys.path)."
            ) from e
        raise


def _import_file(path: Path) -> ModuleType:
    if path.name == "__init__.py":
        return _import_package(path.parent)
    name = f"tpu_kernels_check_{path.stem}"
    if name in sys.modules:
        return sys.modules[name]
    if str(path.parent) not in sys.path:  # the file may import its neighbours
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"tpu-kernels check: cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _import_package(folder: Path) -> ModuleType:
    if str(folder.parent) not in sys.path:
        sys.path.insert(0, str(folder.parent))
    return importlib.import_module(folder.name)


def ops_of(targets: list[str]) -> list[KernelOp]:
    """The ops that importing `targets` registers, or that they (and their submodules) hold,
    with their backward ops; sorted by name."""
    from tpu_kernels.op import KernelOp

    found: dict[str, KernelOp] = {}
    for target in targets:
        before = set(registered_ops())
        module = import_target(target)
        for name, op in registered_ops().items():
            if name not in before:
                found[name] = op
        prefix = module.__name__
        for mod_name, mod in list(sys.modules.items()):
            if mod is None or not (mod_name == prefix or mod_name.startswith(prefix + ".")):
                continue
            for value in list(vars(mod).values()):
                if isinstance(value, KernelOp):
                    found[value.name] = value
    for op in list(found.values()):
        # A composite backward is a torch function of other ops, found on their own.
        if isinstance(op.backward_op, KernelOp):
            found[op.backward_op.name] = op.backward_op
    return [found[k] for k in sorted(found)]
