"""The eager shortcut for a device whose kernel launches by itself: a plain TPU call skips
torch's dispatcher.

Through the dispatcher, an op on TPU tensors goes C++ -> Python three times: the autograd
kernel, the op's TPU kernel, then the torch_tpu op that the TPU kernel calls (a second
custom op: its own dispatch, aliasing check and Dynamo guard) before torch_tpu's
`JaxCallable` launches the kernel: on the chip, well above what a bare `jax_op` costs
(bench/reports/torch_tpu_v5e.json, "per_call", has both).

When the dispatcher's choice is certain, as `eager.EagerCpuCall` decides it for the CPU:
every tensor a plain strided tensor on this device, no gradient needed, no torch function or
dispatch mode, no functorch transform, the dispatch state as at import, not compiling, and
every static of its schema type, `KernelOp.__call__` calls the device's kernel itself, with
the arguments the dispatcher would pass it. Such a call needs no residual, so where the op has
residuals (rmsnorm's inv_rms, the flash template's lse) and the kernel can launch without them
(`TpuKernel.launch_visible`), it does: a second output costs torch_tpu's launch about a whole
call more (bench/reports/torch_tpu_outputs_v5e.json), and the residuals are dropped anyway.
Its kernel, `TpuKernel.launch`, then calls torch_tpu's `JaxCallable` directly
(`runtime.devices.tpu`), and a key it has launched before straight through torch_tpu's C++
launch (`runtime.devices.tpu_launch`). An op that pads to buckets pads here as through the
dispatcher; a call whose key (statics, shapes, dtypes) does not pad is
remembered, so the bucket check runs once per key.

Any other call goes through the dispatcher, unchanged. tests/test_eager_properties.py holds the
shortcut to the dispatcher's results and errors on CPU tensors (the class takes the device
type it serves); the TPU suite does so on the chip (tests/tpu/test_ops.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tpu_kernels.dispatch.buckets import PaddedKernel
from tpu_kernels.dispatch.eager import (
    _TENSOR_TYPES,
    DECLINED,
    _grad_enabled,
    _modes_active,
    call_spec,
    complete_args,
    dense_plain,
    describe_params,
    shortcut_params,
    static_keys,
)

if TYPE_CHECKING:
    from tpu_kernels.definition.protocol import Op

_UNPADDED_MAX = 1024


class EagerDeviceCall:
    """The shortcut for one op on one device type: its checks, and the kernel it calls.

    `kernel`: the op's kernel for the device's dispatch key (a `PaddedKernel` around the
    device kernel when the op pads to buckets); it is called with one value per parameter,
    positional parameters by position and keyword-only ones by name, as the dispatcher calls
    it. `launch`: what runs an unpadded call, given its values as one tuple and the call's key
    (its statics, each tensor's shape and dtype); default: the device kernel itself. The TPU's
    is `TpuKernel.launch`, which launches a key it has seen without torch_tpu's Python
    wrapper (runtime/devices/tpu_launch.py)."""

    def __init__(
        self,
        kernel: Callable,
        params: list[Any],
        device_type: str,
        launch: Callable | None = None,
        n_visible: int | None = None,
        launch_visible: Callable | None = None,
    ) -> None:
        self.kernel = kernel
        self.device_type = device_type
        self.n = len(params)
        self.n_positional = sum(not p.keyword_only for p in params)
        self.keywords = tuple(p.name for p in params[self.n_positional :])
        self.statics, self.tensors = describe_params(params)
        self._spec = call_spec(params)
        self.padded = kernel if isinstance(kernel, PaddedKernel) else None
        device_kernel = self.padded.kernel if self.padded is not None else kernel
        self.n_visible = n_visible
        launch = launch or self._call_kernel(device_kernel)
        if n_visible is not None and launch_visible is None:
            launch = self._trimmed(launch)
        self.launch = launch_visible or launch
        # keys of calls a bucketed op runs unpadded (whether a call pads depends only on its
        # statics, shapes and dtypes): the bucket check runs once per key
        self._unpadded: set[tuple] = set()

    @classmethod
    def for_op(cls, op: Op, dispatch_key: str, device_type: str) -> EagerDeviceCall | None:
        """The shortcut for `op`'s kernel registered under `dispatch_key` ("PrivateUse1" for the
        TPU), or None when the op has none or takes parameters the shortcut does not."""
        kernel = op.device_kernel(dispatch_key)
        if kernel is None or not shortcut_params(op):
            return None
        inner = kernel.kernel if isinstance(kernel, PaddedKernel) else kernel
        n_visible = op.n_visible if op.n_visible < op.signature.n_outputs else None
        launch_visible = getattr(inner, "launch_visible", None) if getattr(inner, "visible_only", False) else None
        return cls(
            kernel, op.signature.params, device_type, getattr(inner, "launch", None), n_visible, launch_visible
        )

    def _call_kernel(self, kernel: Callable) -> Callable[[tuple], Any]:
        n, names = self.n_positional, self.keywords

        def call(values: tuple, key: tuple) -> Any:
            return kernel(*values[:n], **dict(zip(names, values[n:])))

        return call

    def _trim(self, out: Any) -> Any:
        """The visible outputs of a kernel's full result."""
        n = self.n_visible
        if n is None:
            return out
        return out[0] if n == 1 else tuple(out[:n])

    def _trimmed(self, launch: Callable[[tuple, tuple], Any]) -> Callable[[tuple, tuple], Any]:
        def call(values: tuple, key: tuple) -> Any:
            return self._trim(launch(values, key))

        return call

    def try_call(self, args: tuple, kwargs: dict | None = None) -> Any:
        """The op's result as a call returns it (its visible outputs, without residuals), or
        `DECLINED` (then the dispatcher decides)."""
        values = complete_args(args, kwargs, self._spec)
        if values is None or _modes_active():
            return DECLINED
        key: list = []
        if not static_keys(self.statics, values, key):
            return DECLINED
        grad = _grad_enabled()
        device_type = self.device_type
        any_tensor = False  # all None: no backend key, the dispatcher's error
        for i, optional in self.tensors:
            t = values[i]
            if t is None:
                if not optional:
                    return DECLINED
                key.append(None)
                continue
            if type(t) not in _TENSOR_TYPES or t.device.type != device_type or not dense_plain(t, grad):
                return DECLINED
            any_tensor = True
            key.append(t.shape)
            key.append(t.dtype)
        if not any_tensor:
            return DECLINED
        k = tuple(key)
        padded = self.padded
        if padded is not None and k not in self._unpadded:
            if padded.needs_padding(values):
                return self._padded_call(values)
            if len(self._unpadded) >= _UNPADDED_MAX:  # bounded, like a compile cache
                self._unpadded.clear()
            self._unpadded.add(k)
        return self.launch(values, k)

    def _padded_call(self, values: tuple) -> Any:
        n = self.n_positional
        return self._trim(self.padded(*values[:n], **dict(zip(self.keywords, values[n:]))))  # type: ignore[misc]


__all__ = ["EagerDeviceCall"]
