"""TPU: the kernel runs through torch_tpu's public Pallas API, on device, no host copy.

`torch.tpu.pallas.jax_op` registers a JAX function as an op whose TPU kernel
exports the function for the TPU (`jax.export`, platforms=["tpu"]), compiles
it once per shape and launches it on the tensors' device memory. tpu_kernels
registers one such inner op per kernel the first time it runs on a TPU
(`<ns>::<name>__torch_tpu`) and calls it from the outer op's TPU kernel, so
the outer op keeps tpu_kernels' schema, fake function and autograd.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from typing import Any

import torch

from tpu_kernels.errors import BackendUnavailableError
from tpu_kernels.signature import Signature

# torch_tpu renames PrivateUse1 to "tpu" when it is imported; registering on the
# dispatch key rather than the device name works whether or not it is loaded.
DISPATCH_KEY = "PrivateUse1"


def torch_tpu_pallas() -> Any:
    """`torch.tpu.pallas`, or BackendUnavailableError saying how to get it."""
    try:
        import torch_tpu  # noqa: F401
        from torch_tpu._internal.pallas import pallas  # the module behind torch.tpu.pallas
    except ImportError as e:
        raise BackendUnavailableError(
            f"TPU tensors need torch_tpu ({e}). Install it with: pip install torch-tpu"
        ) from e
    return pallas


def inner_function(sig: Signature, fn: Callable, n_results: int | None) -> Callable:
    """`fn` with the signature torch_tpu's `jax_op` reads: jax.Array tensors, typed
    statics, and a return annotation that counts every result (outputs, then the
    new values of mutated arguments)."""
    import jax

    def call(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    params = []
    for p in sig.params:
        ann = _annotation(p.schema_type, jax.Array)
        kind = inspect.Parameter.KEYWORD_ONLY if p.keyword_only else inspect.Parameter.POSITIONAL_OR_KEYWORD
        params.append(inspect.Parameter(p.name, kind, default=p.default, annotation=ann))
    if n_results is None:
        returns: Any = list[jax.Array]
    elif n_results == 1:
        returns = jax.Array
    else:
        returns = tuple[(jax.Array,) * n_results]
    call.__signature__ = inspect.Signature(params, return_annotation=returns)  # type: ignore[attr-defined]
    call.__name__ = getattr(fn, "__name__", "kernel")
    return call


def _annotation(schema_type: str, array: Any) -> Any:
    optional = schema_type.endswith("?")
    base = schema_type.removesuffix("?")
    table: dict[str, Any] = {
        "Tensor": array,
        "Tensor[]": list[array],
        "int": int,
        "float": float,
        "bool": bool,
        "str": str,
        "ScalarType": torch.dtype,
        "int[]": list[int],
        "float[]": list[float],
        "bool[]": list[bool],
    }
    ann = table[base]
    return ann | None if optional else ann


class TpuKernel:
    """The outer op's TPU kernel: builds the torch_tpu inner op on first use."""

    def __init__(
        self,
        qualname: str,
        sig: Signature,
        fn: Callable,
        *,
        n_outputs: int,
        mutated: tuple[int, ...],
        returns_list: bool = False,
    ):
        self.qualname = qualname
        self.sig = sig
        self.fn = fn
        self.n_outputs = n_outputs
        self.mutated = mutated
        self.returns_list = returns_list
        self._inner: Any = None
        self._lock = threading.Lock()

    def inner_op(self) -> Any:
        """The torch_tpu op (a CustomOpDef); built once, thread-safely."""
        with self._lock:
            if self._inner is None:
                pallas = torch_tpu_pallas()
                n_results = None if self.returns_list else self.n_outputs + len(self.mutated)
                fn = inner_function(self.sig, self.fn, n_results)
                self._inner = pallas.jax_op(self.qualname + "__torch_tpu", fn)
            return self._inner

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        inner = self._inner or self.inner_op()
        results = inner(*args, **kwargs)
        if self.returns_list:
            return list(results)
        if not isinstance(results, (tuple, list)):
            results = (results,)
        values = self.sig.values(args, kwargs)
        for j, i in enumerate(self.mutated):
            values[i].copy_(results[self.n_outputs + j])
        if self.n_outputs == 0:
            return None
        if self.n_outputs == 1 and not self.sig.returns_tuple:
            return results[0]
        return tuple(results[: self.n_outputs])
