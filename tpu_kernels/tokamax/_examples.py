"""What the families' `examples.py` share: shorthand for specs, and the TPU implementation order.

Each op's examples (`<op>()`) call it as a TPU tensor would: TPU-sized bfloat16
inputs and the implementation order `resolve_implementation` picks for a TPU (Tokamax's
Mosaic kernel first where there is one, XLA after). `tpu-kernels check` lowers
them with `tokamax.config.cross_compile` set, so Tokamax does not refuse its TPU
kernels on a machine without a TPU; the report says per op whether a Mosaic
kernel was lowered or the order fell through to plain XLA (as it does for the
SparseCore kernels before TPU v7: pass `--chip 7x` to check those).

Each op also has small concrete CPU calls (`<op>_small()`: torch tensors with valid
values, indices in range and group sizes that add up): the calls the sharding
simulation runs every strategy of the op's rule at (`tpu_kernels.sharding.simulate`, the op's
`sharding_examples`), a few elements per dim, odd sizes where a dim is sharded (uneven
shards).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import torch
from jax.experimental.pallas import tpu as pltpu

from tpu_kernels.tokamax.implementation import resolve_implementation

S, BF16, F32, I32, BOOL = jax.ShapeDtypeStruct, jnp.bfloat16, jnp.float32, jnp.int32, jnp.bool_
Calls = list[tuple[tuple, dict]]


def on_tpu(op: str) -> str:
    return resolve_implementation(op, "tpu")


def on_tpu_sparsecore(op: str) -> str:
    """The TPU order of an op whose Mosaic kernel runs on the SparseCore of TPU v7 and
    later. On an earlier chip Tokamax skips that kernel at run time; the check, which
    must bypass Tokamax's device test, asks for XLA there. (The check builds the
    examples under the target chip, so `get_tpu_info` names it.)"""
    try:
        generation = pltpu.get_tpu_info().generation
    except Exception:  # no TPU and no target chip
        generation = 0
    return on_tpu(op) if generation >= 7 else "xla"


def randn(seed: int = 0) -> Callable[..., torch.Tensor]:
    """Standard-normal tensors (never zeros) from a generator of its own, for `<op>_small()`:
    the same calls on every process (a simulated rule is verified on each)."""
    gen = torch.Generator().manual_seed(seed)

    def rn(*shape: int, dtype: torch.dtype = torch.float32, scale: float = 1.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen, dtype=torch.float64) * scale).to(dtype)

    return rn
