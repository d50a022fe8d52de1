"""Small tunable ops shared by the tuning tests: a row kernel whose block size is the tunable."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import torch
from jax.experimental import pallas as pl
from jax.extend.core import Primitive

from tpu_kernels import tpu_kernel
from tpu_kernels.kernels._blocks import parallel_rows, row_block

# A primitive with a shape rule and no lowering: a kernel that binds it traces (eval_shape takes
# it) and fails to compile, as a config the compiler refuses does.
UNLOWERABLE = Primitive("tpu_kernels_test_unlowerable")
UNLOWERABLE.def_abstract_eval(lambda x: x)


def _scale_kernel(x_ref, o_ref, *, wrong_at_first_row: bool):
    x = x_ref[...]
    o_ref[...] = x * 2.0
    if wrong_at_first_row:  # a deliberately wrong candidate: one element per block is off
        o_ref[0, 0] = x[0, 0] * 3.0


def row_scale(x: jax.Array, *, block_rows: int, wrong_rows: int = -1) -> jax.Array:
    """2 * x over (rows, cols), `block_rows` rows per grid step; the config with
    block_rows == wrong_rows computes one element per block wrongly (a wrong candidate)."""
    rows, cols = x.shape
    br = row_block(rows, block_rows)
    spec = pl.BlockSpec((br, cols), lambda i: (i, 0))
    return pl.pallas_call(
        functools.partial(_scale_kernel, wrong_at_first_row=block_rows == wrong_rows),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(pl.cdiv(rows, br),),
        in_specs=[spec],
        out_specs=spec,
        compiler_params=parallel_rows(),
    )(x)


def make_op(
    name: str,
    *,
    candidates=(8, 64, 256),
    default: int = 64,
    wrong: int = -1,
    divides: bool = False,
    fails: tuple = (),
    **options,
):
    """A tunable `2 * x` op named `name`: block_rows among `candidates`, `wrong` a wrong one;
    with `divides`, the kernel refuses a block_rows that does not divide the rows it exceeds;
    `fails` those that trace (so `eval_shape` takes it) but fails to compile."""

    def kernel(x: torch.Tensor, *, block_rows: int = default) -> torch.Tensor:
        if x.ndim != 2:
            raise ValueError(f"{name}: x must be 2-D, got {x.shape}")
        if divides and x.shape[0] > block_rows and x.shape[0] % block_rows:
            raise ValueError(f"{name}: block_rows={block_rows} does not divide the {x.shape[0]} rows")
        out = row_scale(x, block_rows=block_rows, wrong_rows=wrong)
        return UNLOWERABLE.bind(out) if block_rows in fails else out

    kernel.__name__ = name.split("::")[1]
    return tpu_kernel(
        name,
        tune={"block_rows": list(candidates)},
        check_reference=lambda x: 2 * x,
        **options,
    )(kernel)


def double(x: jax.Array) -> jax.Array:
    return jnp.asarray(x) * 2


def make_op2(name: str, *, block_rows=(8, 64, 256), lanes=(128, 256)):
    """A tunable `2 * x` op with two tunables: block_rows and lanes (which the kernel ignores)."""

    def kernel(x: torch.Tensor, *, block_rows: int = 64, lanes: int = 128) -> torch.Tensor:
        return row_scale(x, block_rows=block_rows)

    kernel.__name__ = name.split("::")[1]
    return tpu_kernel(
        name, tune={"block_rows": list(block_rows), "lanes": list(lanes)}, check_reference=lambda x: 2 * x
    )(kernel)
