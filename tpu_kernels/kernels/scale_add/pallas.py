"""out = x + alpha * y, elementwise, as a Pallas TPU kernel.

The arrays are broadcast together, then viewed as 2-D (rows, last dim): one
block is `block_rows` full rows, so any last dimension is legal on TPU. The
sum is computed in float32 (float64 stays float64). Differentiable: a
`jax.custom_vjp` whose backward is the same kernel (d/dx = g, d/dy = alpha g).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from tpu_kernels.kernels._blocks import RowFootprint, cost, require_float, row_params, rows_or_refuse

# VMEM per row of a block (_blocks.RowFootprint): x, y and out blocks, the sum in float32.
FOOTPRINT = RowFootprint(blocks=3, temporaries=2)


def _kernel(x_ref, y_ref, o_ref, *, alpha: float):
    acc = jnp.promote_types(o_ref.dtype, jnp.float32)
    o_ref[...] = (x_ref[...].astype(acc) + alpha * y_ref[...].astype(acc)).astype(o_ref.dtype)


def _call(x: jax.Array, y: jax.Array, alpha: float, block_rows: int | None) -> jax.Array:
    dtype = jnp.result_type(x, y)
    x, y = jnp.broadcast_arrays(x.astype(dtype), y.astype(dtype))
    shape = x.shape
    if x.size == 0:
        return x
    cols = shape[-1] if shape else 1
    x2, y2 = x.reshape(-1, cols), y.reshape(-1, cols)
    rows = x2.shape[0]
    br = rows_or_refuse("scale_add", rows, cols, jnp.dtype(dtype).itemsize, block_rows, FOOTPRINT)
    spec = pl.BlockSpec((br, cols), lambda i: (i, 0))
    out = pl.pallas_call(
        functools.partial(_kernel, alpha=alpha),
        out_shape=jax.ShapeDtypeStruct((rows, cols), dtype),
        grid=(pl.cdiv(rows, br),),
        in_specs=[spec, spec],
        out_specs=spec,
        compiler_params=row_params(FOOTPRINT, br, cols, jnp.dtype(dtype).itemsize),
        cost_estimate=cost(2 * x.size, 0, 3 * x.size * x.dtype.itemsize),
    )(x2, y2)
    return out.reshape(shape)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _scale_add(x, y, alpha, block_rows):
    return _call(x, y, alpha, block_rows)


def _fwd(x, y, alpha, block_rows):
    return _call(x, y, alpha, block_rows), (x, y)  # kept for their shapes and dtypes


def _unbroadcast(g: jax.Array, shape: tuple, dtype) -> jax.Array:
    extra = g.ndim - len(shape)
    g = g.sum(axis=tuple(range(extra))) if extra else g
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1)
    return (g.sum(axis=axes, keepdims=True) if axes else g).astype(dtype)


def _bwd(alpha, block_rows, res, g):
    x, y = res
    dy = _call(jnp.zeros_like(g), g, alpha, block_rows)  # alpha * g, by the same kernel
    return _unbroadcast(g, x.shape, x.dtype), _unbroadcast(dy, y.shape, y.dtype)


_scale_add.defvjp(_fwd, _bwd)


def scale_add(x: jax.Array, y: jax.Array, *, alpha: float = 1.0, block_rows: int | None = None) -> jax.Array:
    """x + alpha * y with numpy broadcasting; result dtype is the promoted input dtype.

    block_rows: rows per grid step; None sizes the block to the chip's VMEM (`_blocks.auto_rows`)."""
    require_float("scale_add", x=x, y=y)
    return _scale_add(x, y, alpha, block_rows)
