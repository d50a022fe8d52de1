"""Row softmax over the last dimension as a Pallas TPU kernel, with its backward kernel.

The input is viewed as (rows, cols); one grid step handles `block_rows` full
rows, so the max and the sum stay in one block. Arithmetic in float32 (float64
stays float64).

    forward:  y = exp(x - max(x)) / sum(exp(x - max(x)))
    backward: dx = y * (dy - sum(dy * y))
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from tpu_kernels.kernels._blocks import cost, is_empty, parallel_rows, require_float, row_block


def _acc(dtype) -> jnp.dtype:
    return jnp.promote_types(dtype, jnp.float32)


def _fwd_kernel(x_ref, o_ref):
    x = x_ref[...].astype(_acc(o_ref.dtype))
    e = jnp.exp(x - jnp.max(x, axis=-1, keepdims=True))
    o_ref[...] = (e / jnp.sum(e, axis=-1, keepdims=True)).astype(o_ref.dtype)


def _bwd_kernel(y_ref, dy_ref, dx_ref):
    acc = _acc(dx_ref.dtype)
    y, dy = y_ref[...].astype(acc), dy_ref[...].astype(acc)
    dx_ref[...] = (y * (dy - jnp.sum(dy * y, axis=-1, keepdims=True))).astype(dx_ref.dtype)


def _rowwise(
    kernel,
    arrays: list[jax.Array],
    out_dtype,
    block_rows: int,
    flops_per_elem: int,
    transcendentals_per_elem: int,
) -> jax.Array:
    shape = arrays[0].shape
    cols = shape[-1]
    flat = [a.reshape(-1, cols) for a in arrays]
    rows = flat[0].shape[0]
    br = row_block(rows, block_rows)
    spec = pl.BlockSpec((br, cols), lambda i: (i, 0))
    n = rows * cols
    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((rows, cols), out_dtype),
        grid=(pl.cdiv(rows, br),),
        in_specs=[spec] * len(flat),
        out_specs=spec,
        compiler_params=parallel_rows(),
        cost_estimate=cost(
            flops_per_elem * n,
            transcendentals_per_elem * n,
            (len(flat) + 1) * n * jnp.dtype(out_dtype).itemsize,
        ),
    )(*flat)
    return out.reshape(shape)


def _check(x: jax.Array) -> None:
    if x.ndim == 0:
        raise ValueError("softmax: x must have at least one dimension (softmax is over the last).")
    require_float("softmax", x=x)


def softmax(x: jax.Array, *, block_rows: int = 256) -> jax.Array:
    """Softmax over the last dimension of x."""
    _check(x)
    if is_empty(x):  # as torch: an empty result of x's shape
        return jnp.zeros(x.shape, x.dtype)
    return _rowwise(_fwd_kernel, [x], x.dtype, block_rows, 5, 1)


def softmax_backward(out: jax.Array, grad_out: jax.Array, *, block_rows: int = 256) -> jax.Array:
    """Gradient of softmax w.r.t. its input, from its output and the output's gradient."""
    if is_empty(out):
        return jnp.zeros(out.shape, out.dtype)
    return _rowwise(_bwd_kernel, [out, grad_out.astype(out.dtype)], out.dtype, block_rows, 4, 0)
