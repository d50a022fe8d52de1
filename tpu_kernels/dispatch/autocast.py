"""Autocast policies: what an op does inside `torch.autocast(...)`.

An op declares one with `@tpu_kernel(..., autocast=POLICY)`:

| policy | under autocast | like torch's |
|---|---|---|
| "keep" (default) | runs in its inputs' dtypes; nothing is cast | any op on no autocast list, and every custom op without an autocast rule |
| "lower_precision_fp" | floating inputs are cast to the autocast dtype (`torch.get_autocast_dtype`) | aten.mm, aten.linear, aten.conv* |
| "fp32" | floating inputs are cast to float32 | CUDA's softmax, layer_norm, the losses |
| "promote" | floating inputs are cast to the widest floating dtype among them | aten.cat, aten.stack, addcdiv |

"keep" is the default because it is what torch does for a custom op that says
nothing, and because it never changes a kernel's numerics behind its author's back.
As in torch's own casts, float64 inputs, non-floating inputs and tensors on
another device type are left alone, and the casts are recorded by autograd, so
gradients come back to float32 parameters in float32.

The rule is registered as a kernel on the Autocast dispatch key of each
registered device (tpu_kernels.runtime.devices) that has one: CPU, CUDA and PrivateUse1
(torch_tpu's "tpu"), and as the same keys' Python kernel, which torch.compile's tracing uses (this is what
`torch.library.register_autocast` does, which only offers a fixed dtype:
"lower_precision_fp" needs the autocast dtype of the moment). The kernel casts,
then calls the op again with that autocast key excluded. Backward ops get no
rule: torch runs backward in the dtypes of the forward.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from tpu_kernels import _compat
from tpu_kernels.errors import OpDefinitionError

if TYPE_CHECKING:
    from tpu_kernels.definition.protocol import Op

POLICIES = ("keep", "lower_precision_fp", "fp32", "promote")


def _keys() -> list[tuple[str, str | None]]:
    """(Autocast dispatch key, device type it casts) for each registered device whose dispatch
    key has an Autocast twin in torch (tpu_kernels.runtime.devices: AutocastCPU, AutocastCUDA,
    AutocastPrivateUse1, ...); PrivateUse1's device type is None: its name is read when
    called (torch_tpu renames it "tpu")."""
    from tpu_kernels.runtime import devices

    keys = _compat.get("DispatchKey").__members__
    return [
        (f"Autocast{d.dispatch_key}", None if d.dispatch_key == "PrivateUse1" else d.name)
        for d in devices.all_devices()
        if f"Autocast{d.dispatch_key}" in keys
    ]


def check_policy(op: str, policy: Any) -> str:
    if policy not in POLICIES:
        raise OpDefinitionError(
            f"{op}: autocast={policy!r}; use one of {', '.join(repr(p) for p in POLICIES)} "
            "(see tpu_kernels.dispatch.autocast)."
        )
    return policy


def _eligible(t: Any, device_type: str) -> bool:
    return (
        isinstance(t, torch.Tensor)
        and t.is_floating_point()
        and t.dtype is not torch.float64
        and t.device.type == device_type
    )


def dtype_under(policy: str, device_type: str, values: Any) -> Callable[[Any], torch.dtype] | None:
    """What each tensor of this call will be after the policy's cast, as a function of the
    tensor (None when autocast is off on `device_type` or the policy casts nothing): the
    dtypes the kernel will see, which the tuned lookup keys by."""
    if policy == "keep" or device_type == "meta" or not torch.is_autocast_enabled(device_type):
        return None  # (torch.autocast has no meta device: is_autocast_enabled("meta") raises)
    dtype = target_dtype(policy, device_type, values)
    if dtype is None:
        return None
    return lambda t: dtype if _eligible(t, device_type) else t.dtype


def _leaves(values: Any) -> list[Any]:
    out = []
    for v in values:
        out.extend(v if isinstance(v, (list, tuple)) else [v])
    return out


def target_dtype(policy: str, device_type: str, values: Any) -> torch.dtype | None:
    """The dtype the policy casts this call's eligible floating inputs to (None: no cast)."""
    if policy == "lower_precision_fp":
        return torch.get_autocast_dtype(device_type)
    if policy == "fp32":
        return torch.float32
    if policy == "promote":
        dtypes = [t.dtype for t in _leaves(values) if _eligible(t, device_type)]
        if not dtypes:
            return None
        widest = dtypes[0]
        for d in dtypes[1:]:
            widest = torch.promote_types(widest, d)
        return widest
    return None


def cast(policy: str, device_type: str, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The call's arguments with the policy's casts applied (new tensors; the caller's untouched)."""
    dtype = target_dtype(policy, device_type, list(args) + list(kwargs.values()))
    if dtype is None:
        return args, kwargs

    def one(v: Any) -> Any:
        if isinstance(v, (list, tuple)):
            return type(v)(one(t) for t in v)
        return v.to(dtype) if _eligible(v, device_type) else v

    return tuple(one(a) for a in args), {k: one(v) for k, v in kwargs.items()}


def _kernel(op: Op, policy: str, key_name: str, device_type: str | None) -> Callable:
    key = getattr(_compat.get("DispatchKey"), key_name)
    excluded = _compat.get("DispatchKeySet")(key)
    privateuse1_name, exclude_guard = (
        _compat.get("privateuse1_backend_name"),
        _compat.get("ExcludeDispatchKeyGuard"),
    )

    def autocast_kernel(*args: Any, **kwargs: Any) -> Any:
        device = device_type or privateuse1_name()
        args, kwargs = cast(policy, device, args, kwargs)
        with exclude_guard(excluded):
            return op.overload(*args, **kwargs)

    return autocast_kernel


def register(op: Op, lib: torch.library.Library, policy: str) -> None:
    """Register `policy` for `op` on every autocast key ("keep" registers nothing)."""
    if policy == "keep":
        return
    for key_name, device_type in _keys():
        kernel = _kernel(op, policy, key_name, device_type)
        lib.impl(op.short_name, kernel, key_name)
        # the Python dispatcher (torch.compile's tracing) looks here first
        op.overload.py_impl(getattr(_compat.get("DispatchKey"), key_name))(kernel)


__all__ = ["POLICIES", "cast", "check_policy", "dtype_under", "register", "target_dtype"]
