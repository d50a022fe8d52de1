"""Where a kernel runs: one small adapter per device type, and the registry of them.

Each device module (`cpu.py`, `cuda.py`, `tpu.py`) ends with `register(DeviceSpec(...))`:
its torch device type, the dispatch key its kernels register on, how an op's JAX body
becomes its kernel there, whether it is available, and the benchmark's policy (clock,
synchronisation, peaks for the roofline). The kernel sources (`sources/`), the Tokamax implementation choice and
the benchmarks read this registry, so a new device is one module plus its registration
(docs/adding-a-device.md). The TPU's helpers sit beside it: `tpu_launch.py` (a call key seen
before, launched straight through torch_tpu's C++ launch) and `tpu_memory.py` (a call that
cannot fit the chip's memory, refused before it launches); `jax_exec.py` runs the CPU's and
CUDA's kernels.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from tpu_kernels import wiring


@dataclasses.dataclass(frozen=True)
class Peaks:
    """A device's peak rates, which the benchmark's roofline compares achieved rates with."""

    flops_per_s: float  # dense bf16
    bytes_per_s: float  # HBM
    source: str  # where the figures come from

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def no_peaks(name: str) -> Peaks | None:
    """A device without peak figures: the benchmark reports achieved rates only."""
    return None


@dataclasses.dataclass(frozen=True)
class DeviceSpec:
    name: str  # torch's device type: "cpu", "cuda", "tpu"
    dispatch_key: str  # where the op's kernel for it registers: "CPU", "CUDA", "PrivateUse1"
    jax_kernel: Callable[[Any, Callable], Callable]  # (the op's OpSpec, JAX body) -> its kernel here
    available: Callable[[], bool]  # can tensors live here in this process
    synchronize: Callable[[], None]  # the benchmark's wait for queued work
    clock: str = "wall"  # how the benchmark times calls: "wall" or "cuda_events"
    aliases: tuple[str, ...] = ()  # other names of its device type ("privateuseone")
    jax_baseline: bool = True  # the benchmark's raw-JAX baseline runs here (tensors via DLPack)
    device_time: bool = False  # the benchmark can read device time from a profile
    # the benchmark's (display name, torch.device); RuntimeError saying why when unavailable
    describe: Callable[[], tuple[str, Any]] = lambda: ("", None)
    # its peaks from its display name (describe()'s), for the benchmark's roofline; None where
    # a roofline is not meaningful (the CPU runs Pallas in an interpreter) or the model is unknown
    peaks: Callable[[str], Peaks | None] = no_peaks
    # the sizes `tpu-kernels bench` times by default: "full" (every benchmark's points), or
    # "reduced" (its `reduced_points`) where kernels run slowly, as in the CPU's interpreter;
    # `--full` asks for the full sizes anywhere (docs/benchmarking.md, "Sizes per device")
    bench_sweep: str = "full"

    def __post_init__(self) -> None:
        if self.clock not in ("wall", "cuda_events"):
            raise ValueError(
                f"device {self.name!r}: clock must be 'wall' or 'cuda_events', got {self.clock!r}"
            )
        if self.bench_sweep not in ("reduced", "full"):
            raise ValueError(
                f"device {self.name!r}: bench_sweep must be 'reduced' or 'full', got {self.bench_sweep!r}"
            )


_DEVICES: dict[str, DeviceSpec] = {}
_BUILT_IN = ("cpu", "cuda", "tpu")  # modules of this package, imported on first use
_loaded = False  # the built-ins imported (whatever else was registered before)


def register(spec: DeviceSpec) -> DeviceSpec:
    """Add a device (an error if its name, an alias or its dispatch key is taken)."""
    for other in _DEVICES.values():
        taken = {other.name, *other.aliases} & {spec.name, *spec.aliases}
        if taken or other.dispatch_key == spec.dispatch_key:
            if other == spec:
                return spec  # a module imported twice (importlib.reload)
            raise ValueError(
                f"device {spec.name!r}: {sorted(taken) or spec.dispatch_key} is already registered by {other.name!r}."
            )
    _DEVICES[spec.name] = spec
    return spec


def _load() -> dict[str, DeviceSpec]:
    """The registry with the built-in devices imported: on the first read, whatever was
    registered before it (a device outside this package registers before the first op).
    No lock: threads that race here import the same modules, which Python imports once."""
    global _loaded
    if not _loaded:
        for name in _BUILT_IN:
            wiring.load(f"tpu_kernels.runtime.devices.{name}")
        _loaded = True
    return _DEVICES


def all_devices() -> list[DeviceSpec]:
    """Every registered device: the built-ins in their order, then the others as registered."""
    specs = list(_load().values())
    rank = {name: i for i, name in enumerate(_BUILT_IN)}
    return sorted(specs, key=lambda d: (rank.get(d.name, len(rank)), specs.index(d)))


def get(device_type: str) -> DeviceSpec:
    """The device for a torch device type or alias ("cuda:1" counts as "cuda"); KeyError naming
    the known ones otherwise."""
    kind = device_type.split(":")[0]
    for spec in _load().values():
        if kind == spec.name or kind in spec.aliases:
            return spec
    known = ", ".join(sorted(n for s in _DEVICES.values() for n in (s.name, *s.aliases)))
    raise KeyError(f"no device {kind!r} is registered; known: {known}")
