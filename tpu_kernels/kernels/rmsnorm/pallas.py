"""RMSNorm over the last dimension as Pallas TPU kernels, forward and backward.

    forward:  r = 1 / sqrt(mean(x^2) + eps);  y = x * r * w
    backward: g = dy * w;  xhat = x * r
              dx = r * (g - xhat * mean(g * xhat))
              dw = sum over rows of dy * xhat

The forward returns r (float32, shape x.shape[:-1] + (1,)) beside y, so the
backward does not recompute it. dw is reduced in two steps: each grid step
writes its block's partial sum, and a plain `sum` adds the partials; so
no grid step depends on another, and both grids are marked "parallel"
(`_blocks.row_params`): on chips with two TensorCores both can work. Blocks are sized
to the chip's VMEM with the body's float32 temporaries counted (`FORWARD`, `BACKWARD`).

dw accumulated instead in one VMEM-resident block per part of a (parts, steps) grid ran
a few percent faster on a v5e at most wide shapes (bench/reports/chip_v5e_rows_probe.json,
probe "partials"), but its row blocks are indexed by two grid axes, one of them "arbitrary",
which the sharding derivation (`tpu_kernels.sharding.derive`) rightly cannot tell apart from
rows that depend on each other: the per-step partials keep the rows' sharding derivable.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jax import export
from jax.experimental import pallas as pl

from tpu_kernels.kernels._blocks import (
    RowFootprint,
    cost,
    is_empty,
    require_float,
    row_params,
    rows_or_refuse,
)
from tpu_kernels.kernels._config import RowsConfig

# VMEM per row of a block (_blocks.RowFootprint): the forward's x and y blocks and its inv_rms
# column, with x, x*x and the output live in float32; the backward's x, dy and dx blocks, its
# inv_rms column and a dw partial, with x, dy, xhat, g and dx live in float32. On a v5e the
# backward in bf16 at [8192, 4096] with 256-row blocks needed more than the 16 MiB default
# limit (bench/reports/chip_v5e.json, "tune"): those temporaries are what the buffers miss.
FORWARD = RowFootprint(blocks=2, temporaries=3, columns=1, weight=True)
BACKWARD = RowFootprint(blocks=3, temporaries=5, columns=1, weight=True)


@dataclass(frozen=True)
class Config(RowsConfig):
    """rmsnorm's blocks: block_rows (`_config.RowsConfig`)."""

    @classmethod
    def default(cls, shape, dtype, *, backward: bool = False) -> Config:
        """The rows per step a call leaving block_rows unset runs its forward (or `backward`)
        with: 0.5-2 MiB of x, fewer rows as they widen (`_blocks.rows_or_refuse`, its
        footprint FORWARD or BACKWARD)."""
        d = shape[-1]
        rows = math.prod(shape[:-1])
        footprint = BACKWARD if backward else FORWARD
        return cls(rows_or_refuse("rmsnorm", rows, d, jnp.dtype(dtype).itemsize, None, footprint))


def _acc(dtype) -> jnp.dtype:
    return jnp.promote_types(dtype, jnp.float32)


def _fwd_kernel(x_ref, w_ref, y_ref, r_ref, *, eps: float):
    acc = _acc(y_ref.dtype)
    x = x_ref[...].astype(acc)
    r = jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps)
    y_ref[...] = (x * r * w_ref[...].astype(acc)).astype(y_ref.dtype)
    r_ref[...] = r.astype(r_ref.dtype)


def _bwd_kernel(x_ref, w_ref, r_ref, dy_ref, dx_ref, dw_ref, *, tail: int = 0, n_blocks: int = 1):
    """One row block. `tail`: the rows of the last block inside the array when the block does
    not divide them (0 when it does); its rows past them hold whatever the edge's copy left, so
    they are kept out of dw by a select (dx's are dropped on the write)."""
    acc = _acc(dx_ref.dtype)
    x, r = x_ref[...].astype(acc), r_ref[...].astype(acc)
    dy, w = dy_ref[...].astype(acc), w_ref[...].astype(acc)
    xhat = x * r
    g = dy * w
    dx_ref[...] = (r * (g - xhat * jnp.mean(g * xhat, axis=-1, keepdims=True))).astype(dx_ref.dtype)
    part = dy * xhat
    if tail:
        valid = jnp.where(pl.program_id(0) == n_blocks - 1, tail, part.shape[0])
        part = jnp.where(jax.lax.broadcasted_iota(jnp.int32, part.shape, 0) < valid, part, jnp.zeros_like(part))
    dw_ref[...] = jnp.sum(part, axis=0, keepdims=True).astype(dw_ref.dtype)


def _check(x: jax.Array, weight: jax.Array) -> None:
    if x.ndim == 0 or weight.shape != (x.shape[-1],):
        raise ValueError(
            f"rmsnorm: weight must have shape (x.shape[-1],) = ({x.shape[-1] if x.ndim else '?'},), "
            f"got {weight.shape} for x of shape {x.shape}."
        )


def rmsnorm(
    x: jax.Array, weight: jax.Array, *, eps: float = 1e-6, block_rows: int | None = None
) -> tuple[jax.Array, jax.Array]:
    """-> (y, inv_rms): y = x / rms(x) * weight, inv_rms float32 of shape x.shape[:-1] + (1,).

    block_rows: rows per grid step; None sizes the block to the chip's VMEM (0.5-2 MiB of x,
    fewer rows as they widen; `_blocks.auto_rows`)."""
    _check(x, weight)
    require_float("rmsnorm", x=x, weight=weight)
    if is_empty(x):  # as torch: y is empty; inv_rms by the formula (NaN for an empty row, as torch's mean)
        r = jax.lax.rsqrt(jnp.mean(x.astype(_acc(x.dtype)) ** 2, axis=-1, keepdims=True) + eps)
        return jnp.zeros(x.shape, x.dtype), r
    d = x.shape[-1]
    x2 = x.reshape(-1, d)
    rows = x2.shape[0]
    if block_rows is None:
        br = Config.default(x.shape, x.dtype).block_rows
    else:
        br = rows_or_refuse("rmsnorm", rows, d, x.dtype.itemsize, block_rows, FORWARD)
    row_spec = pl.BlockSpec((br, d), lambda i: (i, 0))
    y, r = pl.pallas_call(
        functools.partial(_fwd_kernel, eps=eps),
        out_shape=(jax.ShapeDtypeStruct((rows, d), x.dtype), jax.ShapeDtypeStruct((rows, 1), _acc(x.dtype))),
        grid=(pl.cdiv(rows, br),),
        in_specs=[row_spec, pl.BlockSpec((1, d), lambda i: (0, 0))],
        out_specs=(row_spec, pl.BlockSpec((br, 1), lambda i: (i, 0))),
        compiler_params=row_params(FORWARD, br, d, x.dtype.itemsize),
        cost_estimate=cost(4 * rows * d, rows, (2 * rows * d + d) * x.dtype.itemsize + 4 * rows),
    )(x2, weight.reshape(1, d))
    return y.reshape(x.shape), r.reshape(x.shape[:-1] + (1,))


def rmsnorm_backward(
    x: jax.Array, weight: jax.Array, inv_rms: jax.Array, grad_y: jax.Array, *, block_rows: int | None = None
) -> tuple[jax.Array, jax.Array]:
    """-> (dx, dweight), from the forward's inputs, its saved inv_rms and dy."""
    if is_empty(x):  # no rows, or no columns: every gradient is zero (or empty)
        return jnp.zeros(x.shape, x.dtype), jnp.zeros(weight.shape, weight.dtype)
    d = x.shape[-1]
    x2, dy2 = x.reshape(-1, d), grad_y.reshape(-1, d).astype(x.dtype)
    r2 = inv_rms.reshape(-1, 1)
    rows = x2.shape[0]
    if block_rows is None:
        br = Config.default(x.shape, x.dtype, backward=True).block_rows
    else:
        br = rows_or_refuse("rmsnorm_backward", rows, d, x.dtype.itemsize, block_rows, BACKWARD)
    n_blocks = pl.cdiv(rows, br)
    row_spec = pl.BlockSpec((br, d), lambda i: (i, 0))
    # a partial last block, masked in the kernel: no copy of x and dy to pad them (a symbolic size
    # is traced for its shapes only)
    tail = 0 if export.is_symbolic_dim(rows) else rows % br
    dx, dw_parts = pl.pallas_call(
        functools.partial(_bwd_kernel, tail=tail, n_blocks=n_blocks),
        out_shape=(
            jax.ShapeDtypeStruct(x2.shape, x.dtype),
            jax.ShapeDtypeStruct((n_blocks, 1, d), _acc(x.dtype)),
        ),
        grid=(n_blocks,),
        in_specs=[
            row_spec,
            pl.BlockSpec((1, d), lambda i: (0, 0)),
            pl.BlockSpec((br, 1), lambda i: (i, 0)),
            row_spec,
        ],
        # (None, 1, d): the block drops the leading dim, and its last two dims equal the array's.
        out_specs=(row_spec, pl.BlockSpec((None, 1, d), lambda i: (i, 0, 0))),
        # dw is per-block partials, not a cross-step accumulator: the grid stays "parallel"
        compiler_params=row_params(BACKWARD, br, d, x.dtype.itemsize),
        cost_estimate=cost(8 * rows * d, 0, 4 * rows * d * x.dtype.itemsize),
    )(x2, weight.reshape(1, d), r2, dy2)
    dw = dw_parts.sum(axis=(0, 1)).astype(weight.dtype)
    return dx.reshape(x.shape), dw
