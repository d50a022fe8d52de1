"""tpu_kernels: Pallas, JAX and Helion kernels as PyTorch operators, for TPUs first.

from tpu_kernels import tpu_kernel

@tpu_kernel("mylib::scale")
def scale(x: torch.Tensor, *, alpha: float) -> torch.Tensor:
    return pl.pallas_call(...)(x)   # x arrives as a jax.Array

The public names are imported on first use (PEP 562), so `import tpu_kernels` and the
`tpu-kernels` command start without importing torch and JAX until they are needed; the
import uses that to keep torch_tpu and libtpu from probing for a TPU on a machine without
one (`tpu_kernels.startup`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tpu_kernels import startup, wiring

# Before torch or JAX load: without a TPU, neither probes for one (torch_tpu's and libtpu's
# start-up errors on every process); where one exists nothing changes (startup.py).
startup.quiet_start()

from tpu_kernels._version import __version__ as __version__  # noqa: E402 (after quiet_start)

_EXPORTS = {
    "autotune": "tpu_kernels.autotuner",  # a layer above the core: this facade names it, imports it on use
    "TuningNote": "tpu_kernels.tunables",
    "bucket_rows": "tpu_kernels.dispatch.buckets",
    "bucket_size": "tpu_kernels.dispatch.buckets",
    "buckets_of": "tpu_kernels.dispatch.buckets",
    "multiple_of": "tpu_kernels.dispatch.buckets",
    "powers_of_two": "tpu_kernels.dispatch.buckets",
    "CacheInfo": "tpu_kernels.runtime.cache",
    "CheckFailure": "tpu_kernels.verification.checked_mode",
    "checked": "tpu_kernels.verification.checked_mode",
    "BackendUnavailableError": "tpu_kernels.errors",
    "InvalidArgumentError": "tpu_kernels.errors",
    "InvalidArgumentTypeError": "tpu_kernels.errors",
    "KernelError": "tpu_kernels.errors",
    "NoBackwardError": "tpu_kernels.errors",
    "OpDefinitionError": "tpu_kernels.errors",
    "ShardingRuleError": "tpu_kernels.errors",
    "TpuKernelsError": "tpu_kernels.errors",
    "UnsupportedError": "tpu_kernels.errors",
    "interpret_mode": "tpu_kernels.runtime.interpret",
    "set_interpret_mode": "tpu_kernels.runtime.interpret",
    "KernelOp": "tpu_kernels.op",
    "registered_ops": "tpu_kernels.op",
    "tpu_kernel": "tpu_kernels.op",
    "pointwise": "tpu_kernels.sharding",
    "rowwise": "tpu_kernels.sharding",
    "Reference": "tpu_kernels.verification.tolerance",
    "helion_cpu_mode": "tpu_kernels.runtime.sources.helion",
    "set_helion_cpu_mode": "tpu_kernels.runtime.sources.helion",
}

__all__ = [  # the same names as _EXPORTS, once each (tests/test_startup.py checks)
    "BackendUnavailableError",
    "CacheInfo",
    "CheckFailure",
    "InvalidArgumentError",
    "InvalidArgumentTypeError",
    "KernelError",
    "KernelOp",
    "NoBackwardError",
    "OpDefinitionError",
    "Reference",
    "ShardingRuleError",
    "TpuKernelsError",
    "TuningNote",
    "UnsupportedError",
    "autotune",
    "bucket_rows",
    "bucket_size",
    "buckets_of",
    "checked",
    "helion_cpu_mode",
    "interpret_mode",
    "multiple_of",
    "pointwise",
    "powers_of_two",
    "registered_ops",
    "rowwise",
    "set_helion_cpu_mode",
    "set_interpret_mode",
    "tpu_kernel",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tpu_kernels' has no attribute {name!r}")
    value = getattr(wiring.load(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


if TYPE_CHECKING:
    from tpu_kernels.autotuner import autotune
    from tpu_kernels.dispatch.buckets import bucket_rows, bucket_size, buckets_of, multiple_of, powers_of_two
    from tpu_kernels.errors import (
        BackendUnavailableError,
        InvalidArgumentError,
        InvalidArgumentTypeError,
        KernelError,
        NoBackwardError,
        OpDefinitionError,
        ShardingRuleError,
        TpuKernelsError,
        UnsupportedError,
    )
    from tpu_kernels.op import KernelOp, registered_ops, tpu_kernel
    from tpu_kernels.runtime.cache import CacheInfo
    from tpu_kernels.runtime.interpret import interpret_mode, set_interpret_mode
    from tpu_kernels.runtime.sources.helion import helion_cpu_mode, set_helion_cpu_mode
    from tpu_kernels.sharding import pointwise, rowwise
    from tpu_kernels.tunables import TuningNote
    from tpu_kernels.verification.checked_mode import CheckFailure, checked
    from tpu_kernels.verification.tolerance import Reference
