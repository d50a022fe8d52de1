"""Tokamax's ops as torch ops: torch.ops.tokamax.<name>, with gradients, fakes and compile support."""

from tpu_kernels.tokamax.implementation import (
    ImplementationError,
    implementations,
    resolve_implementation,
)
from tpu_kernels.tokamax.wrap import tokamax_op

__all__ = ["ImplementationError", "implementations", "resolve_implementation", "tokamax_op"]
