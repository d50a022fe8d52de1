"""JAX / Pallas kernels: the function is the body on every device."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tpu_kernels.errors import OpDefinitionError
from tpu_kernels.runtime import devices
from tpu_kernels.runtime.cache import CacheInfo
from tpu_kernels.runtime.devices.jax_exec import JaxExecutor


class JaxSource:
    kind = "jax"

    def __init__(self, fn: Callable, visible: Callable | None = None) -> None:
        self.signature_fn = fn
        self.jax_body = fn
        self.lowering_body = fn
        # the op's `visible_kernel=`: the body without its residuals, which a TPU call needing
        # no gradient runs (None: derived from the body, the residuals computed and dropped)
        self.visible_body = visible
        self._executors: dict[str, JaxExecutor] = {}

    def kernels(self, spec: Any) -> dict[str, Callable]:
        if self.visible_body is not None and spec.n_visible == spec.signature.n_outputs:
            raise OpDefinitionError(
                f"{spec.name}: visible_kernel= is the body without the op's residuals, but the op "
                "declares none (residuals=)."
            )
        # one kernel per registered device (tpu_kernels.runtime.devices); those run by tpu_kernels'
        # own executor keep a compile cache, which cache_info reports
        made = {device: device.jax_kernel(spec, self.jax_body) for device in devices.all_devices()}
        self._executors = {d.name: k for d, k in made.items() if isinstance(k, JaxExecutor)}
        return {d.dispatch_key: k for d, k in made.items()}

    def cached_devices(self) -> tuple[str, ...]:
        return tuple(self._executors)

    def cache_info(self, device: str) -> CacheInfo:
        return self._executors[device].cache.info()

    def cache_clear(self) -> None:
        for ex in self._executors.values():
            ex.cache.clear()


# the language registry's hooks (tpu_kernels.runtime.sources): the catch-all, asked last
def recognizes(fn: Any) -> bool:
    return True


def make_source(op_name: str, fn: Any, options: Any) -> JaxSource:
    if options.autotune:
        raise OpDefinitionError(f"{op_name}: autotune=True applies to Helion kernels only.")
    if options.float_only:
        raise OpDefinitionError(
            f"{op_name}: float_only= applies to Helion kernels only; a JAX body checks its "
            "dtypes itself (it can raise while traced)."
        )
    if not callable(fn):
        raise OpDefinitionError(f"{op_name}: expected a JAX/Pallas function or a helion.Kernel, got {fn!r}.")
    visible = options.visible_kernel
    if visible is not None:
        import inspect

        from tpu_kernels.runtime.sources.helion import is_helion_kernel

        if not callable(visible) or is_helion_kernel(visible):
            raise OpDefinitionError(
                f"{op_name}: visible_kernel= must be a JAX function (the body without its residuals), "
                f"got {type(visible).__name__}."
            )
        ours, theirs = list(inspect.signature(fn).parameters), list(inspect.signature(visible).parameters)
        if ours != theirs:
            raise OpDefinitionError(
                f"{op_name}: visible_kernel= takes parameters {theirs}, but the body takes {ours}; "
                "give it the body's parameters, in order."
            )
    return JaxSource(fn, visible)
