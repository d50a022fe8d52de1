"""A KV-cache append written in place, with and without `input_output_aliases` (op namespace
check_alias): the tests of the check's aliasing rule and of the pattern the docs show."""

from __future__ import annotations

import functools

import jax
import numpy as np
import torch
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from tpu_kernels import tpu_kernel

ROWS = 8  # rows appended per call; `pos` is a multiple of it (the block index is pos // ROWS)


def _append(pos_ref, new_ref, cache_ref, out_ref):
    del pos_ref, cache_ref  # the output block is placed by the index map; the cache is not read
    out_ref[...] = new_ref[...]


def append(cache: jax.Array, new: jax.Array, pos: jax.Array, *, alias: bool) -> jax.Array:
    """The cache with `new` written at rows pos..pos+ROWS-1: one grid step, whose output block
    the index map places at the prefetched `pos`. The other rows are not written: with the
    cache aliased to the output they keep the cache's values; without, they are undefined."""
    rows, cols = new.shape
    return pl.pallas_call(
        _append,
        out_shape=jax.ShapeDtypeStruct(cache.shape, cache.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=(1,),
            in_specs=[
                pl.BlockSpec((rows, cols), lambda i, pos: (0, 0)),
                pl.BlockSpec(memory_space=pl.ANY),  # the cache, never copied into VMEM
            ],
            out_specs=pl.BlockSpec((rows, cols), lambda i, pos: (pos[0] // rows, 0)),
        ),
        # operands count the scalar-prefetch ones: pos 0, new 1, cache 2 -> output 0
        input_output_aliases={2: 0} if alias else {},
    )(pos, new, cache)


def _examples():
    cache = jax.ShapeDtypeStruct((32, 128), "float32")
    return [((cache, jax.ShapeDtypeStruct((ROWS, 128), "float32"), np.array([8], np.int32)), {})]


def _reference(cache: torch.Tensor, new: torch.Tensor, pos: torch.Tensor) -> None:
    start = int(pos[0])
    cache[start : start + new.shape[0]] = new


@tpu_kernel("check_alias::append_", mutates_args=("cache",), examples=_examples, check_reference=_reference)
def append_(cache: torch.Tensor, new: torch.Tensor, pos: torch.Tensor) -> None:
    """The pattern: the mutated argument aliased to the output that holds its new value."""
    return append(cache, new, pos, alias=True)


@tpu_kernel(
    "check_alias::append_unaliased_", mutates_args=("cache",), examples=_examples, check_reference=_reference
)
def append_unaliased_(cache: torch.Tensor, new: torch.Tensor, pos: torch.Tensor) -> None:
    """The bug: the new cache is a fresh output, of which the kernel writes 8 rows of 32."""
    return append(cache, new, pos, alias=False)


@tpu_kernel(
    "check_alias::append_jitted_unaliased_",
    mutates_args=("cache",),
    examples=_examples,
    check_reference=_reference,
)
def append_jitted_unaliased_(cache: torch.Tensor, new: torch.Tensor, pos: torch.Tensor) -> None:
    """The bug again, behind a nested jit and a reshape: the check follows the value through."""
    out = jax.jit(functools.partial(append, alias=False))(cache, new, pos)
    return out.reshape(4, 8, 128).reshape(cache.shape)


def _copy_rows(pos_ref, src_ref, cache_ref, src_any_ref, out_ref):
    del pos_ref, cache_ref, src_any_ref
    out_ref[...] = src_ref[...]


def _overwrite_examples():
    cache = jax.ShapeDtypeStruct((32, 128), "float32")
    return [((cache, cache, np.array([8], np.int32)), {})]


@tpu_kernel("check_alias::overwrite_aliased_to_src_", mutates_args=("cache",), examples=_overwrite_examples)
def overwrite_aliased_to_src_(cache: torch.Tensor, src: torch.Tensor, pos: torch.Tensor) -> None:
    """cache[pos:pos+8] = src[pos:pos+8], but the output is aliased to `src`: every other row
    of the cache comes back as src's."""
    spec = pl.BlockSpec((ROWS, 128), lambda i, pos: (pos[0] // ROWS, 0))
    return pl.pallas_call(
        _copy_rows,
        out_shape=jax.ShapeDtypeStruct(cache.shape, cache.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=(1,),
            in_specs=[spec, pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=spec,
        ),
        input_output_aliases={3: 0},  # operands: pos 0, src 1, cache 2, src 3: src, not the cache
    )(pos, src, cache, src)


def _add(x_ref, acc_ref, out_ref):
    out_ref[...] = acc_ref[...] + x_ref[...]


@tpu_kernel(
    "check_alias::add_unaliased_",
    mutates_args=("acc",),
    examples=lambda: [((jax.ShapeDtypeStruct((32, 128), "float32"),) * 2, {})],
)
def add_unaliased_(acc: torch.Tensor, x: torch.Tensor) -> None:
    """acc += x over a grid that writes every block: right without the alias, one copy dearer."""
    spec = pl.BlockSpec((ROWS, 128), lambda i: (i, 0))
    return pl.pallas_call(
        _add,
        out_shape=jax.ShapeDtypeStruct(acc.shape, acc.dtype),
        grid=(acc.shape[0] // ROWS,),
        in_specs=[spec, spec],
        out_specs=spec,
    )(x, acc)
