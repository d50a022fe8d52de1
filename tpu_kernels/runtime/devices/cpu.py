"""CPU: the JAX kernel runs on JAX's CPU backend, Pallas calls in an interpreter."""

from __future__ import annotations

import contextlib
from typing import Any

import jax
import torch
from jax.experimental.pallas import tpu as pltpu

from tpu_kernels.runtime import bridge, devices, interpret
from tpu_kernels.runtime.devices import jax_exec
from tpu_kernels.runtime.devices.jax_exec import pallas_interpret


class CpuTransfer:
    device_type = "cpu"
    # the tensors' cached views, which to_jax returns (eager.py's shortcut reads them itself)
    views = bridge.VIEWS

    def __init__(self) -> None:
        self._sharding: jax.sharding.Sharding | None = None

    def to_jax(self, t: torch.Tensor) -> jax.Array:
        return bridge.VIEWS.get(t)

    # the function itself, not a method calling it: one frame less on every output
    to_torch = staticmethod(bridge.to_torch_cpu)

    def mode(self) -> Any:
        return interpret.current()

    def trace_context(self, mode: Any) -> contextlib.AbstractContextManager:
        return pallas_interpret(mode)

    def sharding(self) -> jax.sharding.Sharding:
        # A tensor seen once crosses as a NumPy array (uncommitted), a cached one as
        # a jax.Array committed to the CPU device: two jit signatures, so two
        # compiles of every kernel, unless the jit pins both to that device.
        if self._sharding is None:
            self._sharding = jax.sharding.SingleDeviceSharding(bridge.cpu_device())
        return self._sharding

    def recover(self, mode: Any) -> None:
        # After an exception inside the TPU interpreter its shared state must be
        # reset before it can run again (see pltpu.InterpretParams' docstring); the
        # reset takes the interpreter's lock, so it never wipes another call's state.
        if isinstance(mode, pltpu.InterpretParams):
            interpret.reset_tpu_interpreter()


TRANSFER = CpuTransfer()


def _cpu_name() -> str:
    """The CPU model, for benchmark reports."""
    import platform

    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


SPEC = devices.register(
    devices.DeviceSpec(
        name="cpu",
        dispatch_key="CPU",
        jax_kernel=lambda spec, body: jax_exec.for_op(spec, body, TRANSFER),
        available=lambda: True,
        synchronize=lambda: None,
        describe=lambda: (_cpu_name(), torch.device("cpu")),
        # Pallas kernels run in an interpreter here (a 2048-cubed matmul takes seconds a call):
        # smaller sizes show the bridge and the baselines as well, in minutes, not a quarter hour
        bench_sweep="reduced",
    )
)
