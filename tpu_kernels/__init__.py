"""tpu_kernels: Pallas, JAX and Helion kernels as PyTorch operators, for TPUs first.

from tpu_kernels import tpu_kernel

@tpu_kernel("mylib::scale")
def scale(x: torch.Tensor, *, alpha: float) -> torch.Tensor:
    return pl.pallas_call(...)(x)   # x arrives as a jax.Array
"""

from tpu_kernels.cache import CacheInfo
from tpu_kernels.checking import CheckFailure, checked
from tpu_kernels.errors import (
    BackendUnavailableError,
    KernelError,
    NoBackwardError,
    OpDefinitionError,
    TpuKernelsError,
)
from tpu_kernels.interpret import interpret_mode, set_interpret_mode
from tpu_kernels.op import KernelOp, registered_ops, tpu_kernel
from tpu_kernels.sources.helion import helion_cpu_mode, set_helion_cpu_mode

__version__ = "0.1.0"

__all__ = [
    "BackendUnavailableError",
    "CacheInfo",
    "CheckFailure",
    "KernelError",
    "KernelOp",
    "NoBackwardError",
    "OpDefinitionError",
    "TpuKernelsError",
    "checked",
    "helion_cpu_mode",
    "interpret_mode",
    "registered_ops",
    "set_helion_cpu_mode",
    "set_interpret_mode",
    "tpu_kernel",
]
