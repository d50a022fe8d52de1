"""torch <-> JAX dtypes, and which of them need JAX's 64-bit mode."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch

from tpu_kernels.errors import FLOAT_DTYPES_TEXT as _FLOAT_DTYPES_TEXT
from tpu_kernels.errors import InvalidArgumentTypeError

TORCH_TO_JAX: dict[torch.dtype, np.dtype] = {
    torch.float64: np.dtype(jnp.float64),
    torch.float32: np.dtype(jnp.float32),
    torch.bfloat16: np.dtype(jnp.bfloat16),
    torch.float16: np.dtype(jnp.float16),
    torch.float8_e4m3fn: np.dtype(jnp.float8_e4m3fn),
    torch.float8_e5m2: np.dtype(jnp.float8_e5m2),
    torch.float8_e4m3fnuz: np.dtype(jnp.float8_e4m3fnuz),
    torch.float8_e5m2fnuz: np.dtype(jnp.float8_e5m2fnuz),
    torch.float8_e8m0fnu: np.dtype(jnp.float8_e8m0fnu),
    torch.int64: np.dtype(jnp.int64),
    torch.int32: np.dtype(jnp.int32),
    torch.int16: np.dtype(jnp.int16),
    torch.int8: np.dtype(jnp.int8),
    torch.uint8: np.dtype(jnp.uint8),
    torch.uint16: np.dtype(jnp.uint16),
    torch.uint32: np.dtype(jnp.uint32),
    torch.bool: np.dtype(jnp.bool_),
}
JAX_TO_TORCH: dict[np.dtype, torch.dtype] = {v: k for k, v in TORCH_TO_JAX.items()}

# JAX silently truncates these to 32 bits unless its x64 mode is on; tpu_kernels
# turns x64 on (thread-locally, only around the call) when a kernel sees one.
WIDE = frozenset({torch.float64, torch.int64})
WIDE_JAX = frozenset(TORCH_TO_JAX[t] for t in WIDE)

# The floating dtypes the shipped kernels (and Helion ops with float_only=) accept, as their
# integer-input error says it (docs/dtypes.md); defined in errors.py, which the kernels' JAX
# halves import without torch.
FLOAT_DTYPES_TEXT = _FLOAT_DTYPES_TEXT


def needs_x64(arrays: Any, statics: dict[str, Any] | None = None) -> bool:
    """Does a call need JAX's 64-bit mode: a 64-bit array (or spec) among `arrays`,
    or a static that names a 64-bit dtype (`out_dtype=torch.float64`), which JAX
    would otherwise quietly turn into its 32-bit counterpart."""
    if any(getattr(leaf, "dtype", None) in WIDE_JAX for leaf in jax.tree_util.tree_leaves(arrays)):
        return True
    return any(_wide_static(v) for v in (statics or {}).values())


def _wide_static(v: Any) -> bool:
    if isinstance(v, torch.dtype):
        return v in WIDE
    if isinstance(v, np.dtype):
        return v in WIDE_JAX
    if isinstance(v, type) and issubclass(v, np.generic):  # jnp.float64, np.int64
        return np.dtype(v) in WIDE_JAX
    if isinstance(v, (list, tuple)):
        return any(_wide_static(x) for x in v)
    return False


SUPPORTED = ", ".join(str(t).removeprefix("torch.") for t in TORCH_TO_JAX)


def to_jax(op: str, arg: str, dtype: torch.dtype) -> np.dtype:
    try:
        return TORCH_TO_JAX[dtype]
    except KeyError:
        raise InvalidArgumentTypeError(
            f"{op}: argument '{arg}' has dtype {dtype}, which tpu_kernels cannot pass "
            f"to JAX. Supported: {SUPPORTED}."
        ) from None


def spec(op: str, arg: str, v: Any, dims: Any = tuple) -> Any:
    """A tensor argument (or a list of them) as the jax.ShapeDtypeStruct a kernel is traced
    with; None, ShapeDtypeStructs and arrays pass through. `dims` maps torch's sizes to
    JAX's (fake.py passes symbolic ones). The one place tensors become specs."""
    if v is None:
        return None
    if isinstance(v, (list, tuple)):
        return [spec(op, arg, t, dims) for t in v]
    if isinstance(v, torch.Tensor):
        return jax.ShapeDtypeStruct(dims(v.shape), to_jax(op, arg, v.dtype))
    return v  # already a ShapeDtypeStruct or an array


def to_torch(op: str, dtype: np.dtype) -> torch.dtype:
    try:
        return JAX_TO_TORCH[np.dtype(dtype)]
    except KeyError:
        raise TypeError(
            f"{op}: the kernel returned dtype {dtype}, which has no torch equivalent "
            f"tpu_kernels supports ({SUPPORTED})."
        ) from None
