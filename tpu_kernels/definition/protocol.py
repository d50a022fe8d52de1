"""What the op's features see of an op: the `Op` protocol.

`op.py` assembles an op (`KernelOp`) from its frozen spec and registers each feature for it:
autograd, vmap, autocast, the eager shortcut, checked mode, sharding, bounds, the TPU export.
The features are handed the op and read it through this protocol; none imports `op.py`, so
the core has no import circle (tests/test_layers.py holds it to that). Everything here is
also on `KernelOp`; the fields the spec decided are documented on `tpu_kernels.spec.OpSpec`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol


class Op(Protocol):
    """A registered kernel op as the features use it."""

    spec: Any  # tpu_kernels.spec.OpSpec
    lib: Any  # its torch.library.Library fragment
    overload: Any  # torch.ops.<ns>.<name>.default
    backward_op: Any  # its backward op (an Op or an autograd Composite), or None

    # the spec's fields (tpu_kernels.spec.OpSpec)
    name: str
    short_name: str
    signature: Any  # tpu_kernels.definition.signature.Signature
    fn: Callable
    fn_name: str
    source: Any
    output_names: tuple[str, ...]
    n_visible: int
    returns_list: bool
    mutates_args: tuple[str, ...]
    check_reference: Any
    examples: Callable | None
    sharding_examples: Callable | None
    cache_size: int
    backward_of: Any

    # what the features registered or read back
    backward_impl: Any
    cpu_kernel: Any
    vmap_rule: Callable | None
    vmap_twin: Any

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...

    def jax_function(self, **statics: Any) -> Callable: ...

    def eval_shape(self, *args: Any, **kwargs: Any) -> Any: ...

    def register_fake(self, fn: Callable) -> Callable: ...

    def def_backward(self, fn: Callable | None = None, **options: Any) -> Any: ...

    def def_vmap(self, fn: Callable) -> Callable: ...


__all__ = ["Op"]
