"""What a kernel is written in: a JAX/Pallas function, or a Helion kernel.

A source gives the op everything that depends on the language:

- `signature_fn`: the function whose signature becomes the op's schema;
- `jax_body`: the kernel as a JAX function of keyword arguments (one per
  parameter) - what the fake function (`jax.eval_shape`), a derived backward
  (`jax.vjp`) and the raw-JAX benchmark baseline use;
- `lowering_body`: the same for the TPU lowering check (for Helion, the TPU
  variant rather than the interpret-mode one);
- `kernels(...)`: the op's kernel per dispatch key (CPU, CUDA, PrivateUse1=TPU).

Adding a kernel language means adding one module here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from tpu_kernels.cache import CacheInfo


class Source(Protocol):
    kind: str
    signature_fn: Callable
    jax_body: Callable
    lowering_body: Callable

    def kernels(self, op: Any) -> dict[str, Callable]: ...

    def cache_info(self, device: str) -> CacheInfo: ...

    def cache_clear(self) -> None: ...


def from_function(fn: Any) -> str:
    """Which source module handles `fn`: "helion" for a helion.Kernel, else "jax"."""
    from tpu_kernels.sources import helion

    return "helion" if helion.is_helion_kernel(fn) else "jax"
