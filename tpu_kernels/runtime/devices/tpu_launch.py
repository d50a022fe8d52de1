"""A TPU kernel launched again the way torch_tpu launches it, without its Python wrapper.

Each call of torch_tpu's `JaxCallable` binds the call to the function's signature, turns
every static into a hashable value, builds a string key of every shape and static, and
looks up the kernel's MLIR fingerprint and output placeholders under that key before its
C++ launch (`call_custom_kernel`). On a v5e that Python is most of what a tiny bare `jax_op`
call costs (bench/reports/torch_tpu_v5e.json's "per_call", and the profile beside it).

The eager shortcut (dispatch/eager_device.py) already holds a key of the same facts: the
call's statics, and each tensor's shape and dtype. `DirectLaunch` remembers, per such key,
what `JaxCallable` derived the first time (`_compat.jax_callable_launch`), and launches
later calls with it directly: the same registered kernel, on the same tensors, in the
same order, with the same output placeholders. A key it has not seen, a kernel torch_tpu
no longer holds, or a torch_tpu whose private helpers moved takes `JaxCallable`'s path.

The tensors go in parameter order, leaving out a None, as `JaxCallable` gathers them: the
shortcut serves only ops whose tensors are plain, one per parameter (`eager.shortcut_params`),
and the inner function torch_tpu sees annotates exactly those as arrays (`tpu.inner_function`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from tpu_kernels import _compat

# a bound like the shortcut's own (`eager_device._UNPADDED_MAX`) and a compile cache's
_MAX_KEYS = 1024


class _Launch(NamedTuple):
    fingerprint: str
    output_shapes: list
    out_tree: Any


class DirectLaunch:
    """The launches of one `JaxCallable` (one op at one matmul precision), by call key.

    `tensor_slots`: the positions in a call's values (one per parameter) of its tensor
    parameters, in order."""

    def __init__(self, fn: Any, tensor_slots: tuple[int, ...]) -> None:
        self.fn = fn
        self.name = fn.name
        self.tensor_slots = tensor_slots
        self._launches: dict[tuple, _Launch] = {}

    @classmethod
    def for_callable(cls, fn: Any, tensor_slots: tuple[int, ...]) -> DirectLaunch | None:
        """A DirectLaunch for `fn`, or None where `fn` is not a `JaxCallable` (the op itself,
        `tpu.jax_callable`) or torch_tpu's launch functions did not resolve."""
        if not hasattr(fn, "exported") or not isinstance(getattr(fn, "name", None), str):
            return None
        if not _compat.all_of(
            "torch_tpu_call_custom_kernel", "torch_tpu_lookup_custom_kernel", "torch_tpu_kernel_invocation_key"
        ):
            return None
        return cls(fn, tensor_slots)

    def known(self, key: tuple) -> _Launch | None:
        """The remembered launch of calls with this key, if torch_tpu still holds its kernel."""
        launch = self._launches.get(key)
        if launch is None or not _compat.get("torch_tpu_lookup_custom_kernel")(self.name, launch.fingerprint):
            return None
        return launch

    def remember(self, key: tuple, args: tuple, kwargs: dict) -> None:
        """After `fn(*args, **kwargs)` ran: keep what it derived for this key."""
        record = _compat.jax_callable_launch(self.fn, args, kwargs)
        if record is None:
            return
        if len(self._launches) >= _MAX_KEYS:
            self._launches.clear()
        self._launches[key] = _Launch(*record)

    def run(self, launch: _Launch, values: tuple) -> Any:
        """`fn`'s result for a call with these values, through its remembered launch."""
        slots = self.tensor_slots
        results = _compat.get("torch_tpu_call_custom_kernel")(
            self.name,
            launch.fingerprint,
            inputs=[values[i] for i in slots if values[i] is not None],  # as JaxCallable: None is no input
            output_shapes=launch.output_shapes,
        )
        return launch.out_tree.unflatten(results)


def tensor_slots(params: Any) -> tuple[int, ...]:
    """The positions of the tensor parameters among `params` (a Signature's)."""
    return tuple(i for i, p in enumerate(params) if p.is_tensor)


__all__ = ["DirectLaunch", "tensor_slots"]
