"""Kernels with known TPU problems, for the tests of `tpu-kernels check` (op namespace check_demo)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import torch
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from tpu_kernels import tpu_kernel
from tpu_kernels.kernels.matmul.pallas import _kernel as _matmul_kernel


def _spec(*shape: int, dtype: str = "float32") -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, dtype)


def _double(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2


def blocked(body, x, grid, out_spec: pl.BlockSpec, *, in_spec=None, aliases=None) -> jax.Array:
    """`body` over one input x on `grid`, into an output like x: the blocks of x are
    `in_spec` (default: the output's). The one-in, one-out pallas_call of the demos here
    and of the coverage tests, which differ only in the grid and the blocks."""
    return pl.pallas_call(
        body,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=grid,
        in_specs=[in_spec or out_spec],
        out_specs=out_spec,
        input_output_aliases=aliases or {},
    )(x)


@tpu_kernel("check_demo::misaligned", examples=lambda: [((_spec(63, 125),), {})])
def misaligned(x: torch.Tensor) -> torch.Tensor:
    """Blocks of (3, 5): neither a multiple of (8, 128) nor the whole array."""
    return blocked(_double, x, (21, 25), pl.BlockSpec((3, 5), lambda i, j: (i, j)))


def _sort(x_ref, o_ref):
    o_ref[...] = jnp.sort(x_ref[...], axis=-1)


@tpu_kernel("check_demo::sorts", examples=lambda: [((_spec(8, 128),), {})])
def sorts(x: torch.Tensor) -> torch.Tensor:
    """jnp.sort inside a kernel: no TPU lowering."""
    return pl.pallas_call(_sort, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


@tpu_kernel("check_demo::huge_blocks", examples=lambda: [((_spec(8192, 8192),), {})])
def huge_blocks(x: torch.Tensor) -> torch.Tensor:
    """One 256 MiB block, double-buffered in and out: no chip has that much VMEM."""
    return blocked(_double, x, (1,), pl.BlockSpec((8192, 8192), lambda i: (i, 0)))


@tpu_kernel("check_demo::no_examples")
def no_examples(x: torch.Tensor) -> torch.Tensor:
    return x * 2


# The shipped matmul's kernel body (its k axis carries the accumulator) under dimension
# semantics of the demo's choosing: the race is in racy_matmul's "parallel" k axis, not in
# the body. Should the shipped body stop accumulating over k, racy_matmul would stop
# failing the check, and tests/check/test_check.py and test_semantics_and_limits.py say so.
def _matmul(a, b, semantics):
    (m, k), n = a.shape, b.shape[1]
    grid = (m // 128, n // 128, k // 128)
    return pl.pallas_call(
        functools.partial(_matmul_kernel, n_k=grid[2]),
        out_shape=jax.ShapeDtypeStruct((m, n), a.dtype),
        grid=grid,
        in_specs=[
            pl.BlockSpec((128, 128), lambda i, j, kk: (i, kk)),
            pl.BlockSpec((128, 128), lambda i, j, kk: (kk, j)),
        ],
        out_specs=pl.BlockSpec((128, 128), lambda i, j, kk: (i, j)),
        scratch_shapes=[pltpu.VMEM((128, 128), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=semantics),
    )(a, b)


def _matmul_examples():
    return [((_spec(128, 512), _spec(512, 128)), {})]


@tpu_kernel("check_demo::racy_matmul", examples=_matmul_examples)
def racy_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The k axis carries the accumulator but is marked "parallel": a race with two cores."""
    return _matmul(a, b, ("parallel", "parallel", "parallel"))


@tpu_kernel("check_demo::sound_matmul", examples=_matmul_examples, reference=lambda a, b: a @ b)
def sound_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The same kernel with the k axis "arbitrary"; its backward is derived from a reference."""
    return _matmul(a, b, ("parallel", "parallel", "arbitrary"))


@tpu_kernel(
    "check_demo::scaled",
    outputs=("y", "e"),
    residuals=("e",),
    examples=lambda: [((_spec(16, 256, dtype="bfloat16"),), {"scale": 3.0})],
)
def scaled(x: torch.Tensor, *, scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    e = pl.pallas_call(_double, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
    return e * scale, e


@scaled.def_backward
def scaled_backward(e: torch.Tensor, grad_y: torch.Tensor, *, scale: float) -> torch.Tensor:
    return grad_y * scale * 2


def _rows_of_8(x: torch.Tensor, rows: int) -> torch.Tensor:
    return blocked(_double, x, (rows,), pl.BlockSpec((8, x.shape[1]), lambda i: (i, 0)))


@tpu_kernel("check_demo::floor_grid", examples=lambda: [((_spec(12, 128),), {})])
def floor_grid(x: torch.Tensor) -> torch.Tensor:
    """grid=(12 // 8,): one step of 8 rows, rows 8-11 never written."""
    return _rows_of_8(x, x.shape[0] // 8)


@tpu_kernel("check_demo::cdiv_grid", examples=lambda: [((_spec(12, 128),), {})])
def cdiv_grid(x: torch.Tensor) -> torch.Tensor:
    """grid=(pl.cdiv(12, 8),): the second block is partial, which Pallas masks."""
    return _rows_of_8(x, pl.cdiv(x.shape[0], 8))


@tpu_kernel("check_demo::past_the_end", examples=lambda: [((_spec(12, 128),), {})])
def past_the_end(x: torch.Tensor) -> torch.Tensor:
    """Four steps of 8 rows on 12 rows: blocks 2 and 3 lie entirely past the array."""
    return _rows_of_8(x, 4)
