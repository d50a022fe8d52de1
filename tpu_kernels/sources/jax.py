"""JAX / Pallas kernels: the function is the body on every device."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tpu_kernels.cache import CacheInfo
from tpu_kernels.devices import cpu as cpu_device
from tpu_kernels.devices import cuda as cuda_device
from tpu_kernels.devices import tpu as tpu_device
from tpu_kernels.devices.jax_exec import JaxExecutor


class JaxSource:
    kind = "jax"

    def __init__(self, fn: Callable) -> None:
        self.signature_fn = fn
        self.jax_body = fn
        self.lowering_body = fn
        self._executors: dict[str, JaxExecutor] = {}

    def kernels(self, op: Any) -> dict[str, Callable]:
        common = dict(
            n_outputs=op.signature.n_outputs,
            mutated=op.mutated,
            maxsize=op.cache_size,
            noncontiguous=op.noncontiguous,
            returns_list=op.returns_list,
        )
        self._executors = {
            "cpu": JaxExecutor(op.signature, self.jax_body, cpu_device.TRANSFER, **common),
            "cuda": JaxExecutor(op.signature, self.jax_body, cuda_device.TRANSFER, **common),
        }
        tpu = tpu_device.TpuKernel(
            op.name,
            op.signature,
            self.jax_body,
            n_outputs=op.signature.n_outputs,
            mutated=op.mutated,
            returns_list=op.returns_list,
        )
        return {"CPU": self._executors["cpu"], "CUDA": self._executors["cuda"], tpu_device.DISPATCH_KEY: tpu}

    def cache_info(self, device: str) -> CacheInfo:
        return self._executors[device].cache.info()

    def cache_clear(self) -> None:
        for ex in self._executors.values():
            ex.cache.clear()
