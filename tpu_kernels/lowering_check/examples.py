"""Representative calls of an op, for the TPU lowering check and the race check.

A forward op gives its own (`examples=` on `@tpu_kernel`). A backward op
(`<name>_backward`) has none; its calls are derived from the forward's:

its parameters bound by name to the forward's inputs, outputs (shapes from
`op.eval_shape`) and `grad_<output>` (shaped like the output). That covers an
explicit backward (`@op.def_backward`) and a derived one (`jax.vjp`), whose
parameters are `grad_<output>` per returned output, then the forward's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from tpu_kernels.definition import dtypes
from tpu_kernels.op import registered_ops

if TYPE_CHECKING:
    from tpu_kernels.op import KernelOp

Call = tuple[tuple, dict]


def forward_of(op: KernelOp) -> KernelOp | None:
    """The op whose backward `op` is, if any."""
    for fwd in registered_ops().values():
        if fwd.backward_op is op:
            return fwd
    return None


def _outputs(fwd: KernelOp, args: tuple, kwargs: dict) -> list[jax.ShapeDtypeStruct]:
    out = fwd.eval_shape(*args, **kwargs)
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _grad_spec(out: jax.ShapeDtypeStruct) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(out.shape, out.dtype)


def backward_calls(fwd: KernelOp, bwd: KernelOp, forward_calls: Sequence[Call]) -> list[Call]:
    """The calls of `bwd` that the forward's example calls lead to."""
    calls = []
    for args, kwargs in forward_calls:
        values = fwd.signature.bind(args, kwargs)
        outs = _outputs(fwd, args, kwargs)
        visible = outs[: fwd.n_visible]
        env: dict[str, Any] = {p.name: v for p, v in zip(fwd.signature.params, values)}
        env.update(zip(fwd.output_names, outs))
        env.update({f"grad_{n}": _grad_spec(o) for n, o in zip(fwd.output_names, visible)})
        pos = tuple(env[p.name] for p in bwd.signature.params if not p.keyword_only)
        kw = {p.name: env[p.name] for p in bwd.signature.params if p.keyword_only and p.name in env}
        calls.append((pos, kw))
    return calls


def example_calls(op: KernelOp) -> list[Call] | None:
    """The op's representative calls (derived for backward ops); None when it has none."""
    if op.examples is not None:
        return list(op.examples())
    fwd = forward_of(op)
    if fwd is None or fwd.examples is None:
        return None
    return backward_calls(fwd, op, list(fwd.examples()))


def describe(value: Any) -> str:
    """A short text for one argument: `bf16[512,256]`, `[f32[8,128]]`, `alpha=0.5`."""
    if isinstance(value, (list, tuple)) and value and all(hasattr(v, "shape") for v in value):
        return "[" + ", ".join(describe(v) for v in value) + "]"
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        name = np.dtype(value.dtype).name if not hasattr(value, "is_floating_point") else str(value.dtype)
        name = name.removeprefix("torch.")
        short = {"bfloat16": "bf16", "float32": "f32", "float16": "f16", "float64": "f64"}.get(name, name)
        return f"{short}[{','.join(str(d) for d in value.shape)}]"
    return repr(value)


def describe_call(args: tuple, kwargs: dict) -> str:
    parts = [describe(a) for a in args] + [f"{k}={describe(v)}" for k, v in kwargs.items()]
    return ", ".join(parts)


# ---- concrete inputs for the race check ----------------------------------------------

MAX_TRAILING = 512  # the last two dimensions of every tensor, at most
MAX_LEADING = 2  # every other dimension, at most


def scale_down(calls: Sequence[Call]) -> list[Call]:
    """The calls with every tensor shrunk, consistently across arguments: each size above
    the cap becomes the cap (512 for the last two dimensions, 2 for the others), so equal
    sizes stay equal and aligned ones stay aligned. A call that gives concrete arrays
    (index values) is kept as it is: their values refer to its shapes."""

    def shrink(spec: Any) -> Any:
        rank = len(spec.shape)
        shape = tuple(
            min(d, MAX_TRAILING if i >= rank - 2 else MAX_LEADING) for i, d in enumerate(spec.shape)
        )
        return jax.ShapeDtypeStruct(shape, _jax_dtype(spec.dtype))

    return [call if _has_concrete(call) else _map_specs(shrink, call) for call in calls]


def odd_tiles(calls: Sequence[Call]) -> list[Call]:
    """The calls with every even size of 16 or more made 3/2 as large (512 -> 768,
    256 -> 384), consistently across arguments: a dimension split into 2^n blocks becomes
    3 * 2^(n-1), an odd count when n is 1 (the scaled-down examples' usual case).

    Why: the race detector splits a "parallel" grid axis between two simulated cores, and
    with an even tile count each core's half of an accumulation axis can line up with the
    other's so that no two cores touch one block at once: matmul with its k axis marked
    "parallel" raced on a 3x3x3 grid but not on 2x2x2. Odd counts break that symmetry.
    A call that gives concrete arrays is kept as it is (see `scale_down`)."""

    def grow(d: int) -> int:
        return d * 3 // 2 if d >= 16 and d % 2 == 0 else d

    def change(spec: Any) -> Any:
        return jax.ShapeDtypeStruct(tuple(grow(d) for d in spec.shape), _jax_dtype(spec.dtype))

    return [call if _has_concrete(call) else _map_specs(change, call) for call in calls]


def _has_concrete(call: Call) -> bool:
    """Does the call give values (index arrays)? Their values refer to the call's shapes, so
    such a call is never rescaled."""
    args, kwargs = call
    leaves = jax.tree_util.tree_leaves((args, kwargs), is_leaf=is_concrete)
    return any(is_concrete(v) for v in leaves)


def _map_specs(fn: Callable[[Any], Any], call: Call) -> Call:
    """`call` with `fn` applied to each tensor spec (anything with a shape and a dtype) among
    its arguments, inside lists and tuples too; every other value is kept as it is."""

    def each(value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            return type(value)(each(v) for v in value)
        return fn(value) if hasattr(value, "shape") and hasattr(value, "dtype") else value

    args, kwargs = call
    return tuple(each(a) for a in args), {k: each(v) for k, v in kwargs.items()}


def _jax_dtype(dtype: Any) -> np.dtype:
    import torch

    if isinstance(dtype, torch.dtype):
        return dtypes.TORCH_TO_JAX[dtype]
    return np.dtype(dtype)


def is_concrete(value: Any) -> bool:
    """An argument with values (a NumPy or JAX array), not only a shape (a ShapeDtypeStruct)."""
    return isinstance(value, (np.ndarray, jax.Array))


def integer_specs(op: KernelOp, args: tuple, kwargs: dict) -> list[str]:
    """The names of the integer tensor arguments of a call given as shapes only (the
    interpreter runs fill them with zeros)."""
    values = op.signature.bind(args, kwargs)
    names = []
    for p, v in zip(op.signature.params, values):
        leaves = v if isinstance(v, (list, tuple)) else [v]
        if p.is_tensor and any(
            hasattr(t, "dtype") and not is_concrete(t) and np.issubdtype(_jax_dtype(t.dtype), np.integer)
            for t in leaves
        ):
            names.append(p.name)
    return names


def random_arrays(call: Call, seed: int = 0) -> Call:
    """Concrete JAX arrays for the specs of one call: standard normal for floating
    types (never zeros), zeros for integers and booleans. Arrays the call gives
    (index values, say) are kept."""
    rng = np.random.default_rng(seed)

    def make(spec: Any) -> Any:
        if is_concrete(spec):
            return jax.numpy.asarray(spec)
        dt = _jax_dtype(spec.dtype)
        if jax.numpy.issubdtype(dt, jax.numpy.floating):
            data = rng.standard_normal(math.prod(spec.shape)).reshape(spec.shape)
            return jax.numpy.asarray(data, dtype=dt)
        return jax.numpy.zeros(spec.shape, dt)

    return _map_specs(make, call)
