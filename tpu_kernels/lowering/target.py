"""TPU generations: which one the lowering targets, and its VMEM.

Some lowerings depend on the TPU generation (JAX asks `get_tpu_info()`, which on
a machine without a TPU fails unless an abstract mesh names the device), so the
lowering targets one chip: `tpu-kernels check` the one `--chip` names (default
v6e, on any machine); `op.lower()` the attached TPU, or v6e without one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import jax

DEFAULT_CHIP = "v6e"

# JAX's device_kind strings, one per generation (jax._src.tpu_info.chip_version_from_device_kind).
_DEVICE_KINDS = (
    "TPU v2",
    "TPU v3",
    "TPU v4",
    "TPU v4 lite",
    "TPU v5 lite",
    "TPU v5",
    "TPU v6 lite",
    "TPU7",
    "TPU7x",
    "TPU8i",
    "TPU8t",
)


# Mosaic's default scoped VMEM limit per generation: what one kernel may use without
# pltpu.CompilerParams(vmem_limit_bytes=...) (XLA's --xla_tpu_scoped_vmem_limit_kib default).
# 16 MiB up to v5e/v5p (JAX's Pallas TPU docs), 32 MiB from v6e on (Tokamax 0.0.17,
# ops/proj_and_save_state/pallas_mosaic_tpu.py: "XLA's default 32 MiB scoped VMEM limit").
# Not measurable without a TPU; the 8th generation's figure is not published: 32 MiB assumed.
# A kernel may use all of it: on a v5e, buffers of exactly 16.0 MiB compile, the compiler's
# scoped allocation being their sum (bench/reports/chip_corpus_v5e.json; other generations are
# assumed alike).
_MIB = 2**20
SCOPED_VMEM_BYTES = {
    "v2": 16 * _MIB,
    "v3": 16 * _MIB,
    "v4i": 16 * _MIB,
    "v4": 16 * _MIB,
    "v5e": 16 * _MIB,
    "v5p": 16 * _MIB,
    "v6e": 32 * _MIB,
    "7": 32 * _MIB,
    "7x": 32 * _MIB,
    "8i": 32 * _MIB,
    "8t": 32 * _MIB,
}
SMALLEST_SCOPED_VMEM_BYTES = min(SCOPED_VMEM_BYTES.values())

# The generations the shipped kernels' defaults are sized for (tests/lowering_check/test_semantics_and_limits.py
# pins that every shipped example fits each one's default scoped limit; tests/lowering_check/test_vmem_limits.py
# pins each generation's limit above to its documented value).
TARGET_CHIPS = ("v5e", "v5p", "v6e", "7x")


@dataclass(frozen=True)
class Chip:
    name: str  # JAX's short name: "v5e", "v5p", "v6e", "7x", ...
    device_kind: str  # what jax.Device.device_kind says on that chip
    vmem_bytes: int  # per TensorCore
    scoped_vmem_bytes: int = SMALLEST_SCOPED_VMEM_BYTES  # Mosaic's default limit per kernel


def chip(name: str = DEFAULT_CHIP) -> Chip:
    """A TPU generation by JAX's name for it ("v5e", "v5p", "v6e", "7x", ...)."""
    from jax.experimental.pallas import tpu as pltpu

    from tpu_kernels import _compat

    try:
        version = pltpu.ChipVersion(name)
    except ValueError:
        known = ", ".join(v.value for v in pltpu.ChipVersion)
        raise ValueError(f"unknown TPU chip {name!r}; known: {known}") from None
    version_of = _compat.get("chip_version_from_device_kind")
    kind = next(k for k in _DEVICE_KINDS if version_of(k) == version)
    vmem = pltpu.get_tpu_info_for_chip(version, 1).vmem_capacity_bytes
    return Chip(name, kind, vmem, SCOPED_VMEM_BYTES.get(version.value, SMALLEST_SCOPED_VMEM_BYTES))


@contextlib.contextmanager
def targeting(target: Chip | None) -> Iterator[None]:
    """Lower for `target` (None: the attached TPU, or the default chip without one)."""
    if target is None:
        if jax.default_backend() == "tpu" or _active_tpu_mesh():
            yield  # the attached TPU, or a target the caller already set
            return
        target = chip()
    mesh = jax.sharding.AbstractMesh(
        (), (), abstract_device=jax.sharding.AbstractDevice(target.device_kind, 1, "tpu")
    )
    with jax.sharding.use_abstract_mesh(mesh):
        yield


def _active_tpu_mesh() -> bool:
    """An abstract mesh naming a TPU device kind is already in effect."""
    try:
        mesh = jax.sharding.get_abstract_mesh()
    except Exception:  # pragma: no cover - API moved
        return False
    device = getattr(mesh, "abstract_device", None)
    return device is not None and str(getattr(device, "device_kind", "")).upper().startswith("TPU")
