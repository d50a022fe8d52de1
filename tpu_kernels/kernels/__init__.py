"""Kernels that ship with tpu_kernels (supported API), one folder per family.

Each family has `pallas.py` (the kernel and its JAX wrapper: pure JAX, no
torch), `reference.py` (torch and JAX references), `shapes.py` (named shapes
shared by tests and benchmarks) and `__init__.py`, which registers the torch
op `torch.ops.tpu_kernels.<name>` and ends with the family's registration
(`registry.register`, see `registry.py`). Importing this package imports every
family folder, so a new folder needs no line here; each family's op is
exported under its name.

    from tpu_kernels.kernels import matmul, rmsnorm, scale_add, softmax
"""

from tpu_kernels import wiring as _wiring
from tpu_kernels.kernels.registry import FAMILIES

_wiring.discover(__name__, __path__)  # every family folder, alphabetically: each registers itself
globals().update({family.op.short_name: family.op for family in FAMILIES.values()})
__all__ = sorted(family.op.short_name for family in FAMILIES.values())
