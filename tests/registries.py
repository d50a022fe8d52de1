"""The registries as the cross-cutting tests' parameter lists, in one place.

Every test that runs once per kernel family, Tokamax op or device takes its parameters
from here, never from a hand-written list, so a family or device registered later is
tested without an edit; tests/test_registry_extension.py registers throwaway ones and
checks that each collected test list grows by them.
"""

from __future__ import annotations

from tpu_kernels.kernels import FAMILIES as KERNEL_FAMILIES
from tpu_kernels.kernels.registry import Family
from tpu_kernels.op import KernelOp
from tpu_kernels.runtime import devices


def kernel_families() -> list[Family]:
    """Every registered kernel family (tpu_kernels.kernels.FAMILIES), in registration order."""
    return list(KERNEL_FAMILIES.values())


def family_id(family: Family) -> str:
    return family.name


def tokamax_ops() -> list[KernelOp]:
    """Every forward op of every registered Tokamax family (tokamax.FAMILIES)."""
    from tpu_kernels.tokamax.registry import all_ops

    return all_ops()


def op_id(op: KernelOp) -> str:
    return op.short_name


def device_names() -> list[str]:
    """Every registered device's name (tpu_kernels.runtime.devices)."""
    return [d.name for d in devices.all_devices()]
