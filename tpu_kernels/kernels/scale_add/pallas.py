"""out = x + alpha * y, elementwise, as a Pallas TPU kernel.

The arrays are broadcast together, then viewed as 2-D (rows, last dim): one
block is `block_rows` full rows, so any last dimension is legal on TPU. The
sum is computed in float32 (float64 stays float64). Differentiable: a
`jax.custom_vjp` (d/dx = g; d/dy = alpha g, by a one-input kernel of the same layout).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from tpu_kernels.kernels._blocks import (
    RowFootprint,
    cost,
    require_float,
    row_params,
    rows_or_refuse,
)
from tpu_kernels.kernels._config import RowsConfig

# VMEM per row of a block (_blocks.RowFootprint): x, y and out blocks, the sum in float32; the
# backward's alpha * g reads one block and writes one.
FOOTPRINT = RowFootprint(blocks=3, temporaries=2)
SCALED = RowFootprint(blocks=2, temporaries=1)


@dataclass(frozen=True)
class Config(RowsConfig):
    """scale_add's blocks: block_rows (`_config.RowsConfig`)."""

    @classmethod
    def default(cls, shape, dtype, *, backward: bool = False) -> Config:
        """The rows per step a call (of the broadcast `shape`) leaving block_rows unset runs its
        forward (or `backward`, alpha * g) with (`_blocks.rows_or_refuse`, its footprint
        FOOTPRINT or SCALED)."""
        cols = shape[-1] if shape else 1
        rows = math.prod(shape) // cols if cols else 0
        footprint = SCALED if backward else FOOTPRINT
        return cls(rows_or_refuse("scale_add", rows, cols, jnp.dtype(dtype).itemsize, None, footprint))


def _acc(dtype) -> jnp.dtype:
    """The arithmetic's dtype: float32, or float64 for float64."""
    return jnp.promote_types(dtype, jnp.float32)


def _kernel(x_ref, y_ref, o_ref, *, alpha: float):
    acc = _acc(o_ref.dtype)
    o_ref[...] = (x_ref[...].astype(acc) + alpha * y_ref[...].astype(acc)).astype(o_ref.dtype)


def _scaled_kernel(y_ref, o_ref, *, alpha: float):
    acc = _acc(o_ref.dtype)
    o_ref[...] = (alpha * y_ref[...].astype(acc)).astype(o_ref.dtype)


def _rows(kernel, arrays: list[jax.Array], backward: bool, flops: int, block_rows: int | None) -> jax.Array:
    """`kernel` over the arrays (one shape and dtype) viewed as 2-D (rows, last dim), a block of
    full rows a grid step; `backward`: the alpha * g kernel (its footprint SCALED)."""
    footprint = SCALED if backward else FOOTPRINT
    shape, dtype = arrays[0].shape, arrays[0].dtype
    if arrays[0].size == 0:
        return arrays[0]
    cols = shape[-1] if shape else 1
    flat = [a.reshape(-1, cols) for a in arrays]
    rows = flat[0].shape[0]
    if block_rows is None:
        br = Config.default(shape, dtype, backward=backward).block_rows
    else:
        br = rows_or_refuse("scale_add", rows, cols, jnp.dtype(dtype).itemsize, block_rows, footprint)
    spec = pl.BlockSpec((br, cols), lambda i: (i, 0))
    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((rows, cols), dtype),
        grid=(pl.cdiv(rows, br),),
        in_specs=[spec] * len(flat),
        out_specs=spec,
        compiler_params=row_params(footprint, br, cols, jnp.dtype(dtype).itemsize),
        cost_estimate=cost(flops * arrays[0].size, 0, (len(flat) + 1) * arrays[0].size * jnp.dtype(dtype).itemsize),
    )(*flat)
    return out.reshape(shape)


def _call(x: jax.Array, y: jax.Array, alpha: float, block_rows: int | None) -> jax.Array:
    dtype = jnp.result_type(x, y)
    x, y = jnp.broadcast_arrays(x.astype(dtype), y.astype(dtype))
    return _rows(functools.partial(_kernel, alpha=alpha), [x, y], False, 2, block_rows)


def _scaled(g: jax.Array, alpha: float, block_rows: int | None) -> jax.Array:
    """alpha * g by its own kernel: one read and one write (x + alpha * g with x a zeros array
    would write the zeros, then read them)."""
    return _rows(functools.partial(_scaled_kernel, alpha=alpha), [g], True, 1, block_rows)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _scale_add(x, y, alpha, block_rows):
    return _call(x, y, alpha, block_rows)


def _fwd(x, y, alpha, block_rows):
    # the backward needs only x's and y's shapes and dtypes: zero-size stand-ins carry them, so
    # the inputs are not kept alive as residuals until the backward runs
    return _call(x, y, alpha, block_rows), (_like(x), _like(y))


def _like(a: jax.Array) -> jax.Array:
    """A zero-size array whose shape[1:] and dtype are a's."""
    return jnp.zeros((0, *a.shape), a.dtype)


def _unbroadcast(g: jax.Array, shape: tuple, dtype) -> jax.Array:
    extra = g.ndim - len(shape)
    g = g.sum(axis=tuple(range(extra))) if extra else g
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1)
    return (g.sum(axis=axes, keepdims=True) if axes else g).astype(dtype)


def _bwd(alpha, block_rows, res, g):
    x, y = res
    dy = _scaled(g, alpha, block_rows)
    return _unbroadcast(g, x.shape[1:], x.dtype), _unbroadcast(dy, y.shape[1:], y.dtype)


_scale_add.defvjp(_fwd, _bwd)


def scale_add(x: jax.Array, y: jax.Array, *, alpha: float = 1.0, block_rows: int | None = None) -> jax.Array:
    """x + alpha * y with numpy broadcasting; result dtype is the promoted input dtype.

    block_rows: rows per grid step; None sizes the block to the chip's VMEM (`_blocks.auto_rows`)."""
    require_float("scale_add", x=x, y=y)
    return _scale_add(x, y, alpha, block_rows)
