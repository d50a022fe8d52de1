"""The exceptions tpu_kernels raises. Every message names the op it concerns.

`docs/troubleshooting.md` lists each message, what it means and what to do.
"""


class TpuKernelsError(Exception):
    """Base class of the errors raised by tpu_kernels itself."""


class OpDefinitionError(TpuKernelsError, TypeError):
    """The decorated function or the decorator's options cannot define an op."""


class KernelError(TpuKernelsError, RuntimeError):
    """The kernel failed while tracing, compiling or running; the cause is chained."""


class BackendUnavailableError(TpuKernelsError, RuntimeError):
    """The device's backend (torch_tpu, JAX's CUDA plugin, ...) is not installed."""


class NoBackwardError(TpuKernelsError, RuntimeError):
    """Backward was requested through an op that defines no backward."""


class ShardingRuleError(TpuKernelsError, ValueError):
    """A sharding rule disagrees with its kernel (the local simulation found a wrong strategy),
    gives DTensor no usable strategy, or cannot be derived (`sharding="derived"`)."""
