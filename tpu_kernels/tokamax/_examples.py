"""What the families' `examples.py` share: shorthand for specs, and the TPU implementation order.

Each op's examples call it as a TPU tensor would: TPU-sized bfloat16 inputs and
the implementation order `resolve_implementation` picks for a TPU (Tokamax's
Mosaic kernel first where there is one, XLA after). `tpu-kernels check` lowers
them with `tokamax.config.cross_compile` set, so Tokamax does not refuse its TPU
kernels on a machine without a TPU; the report says per op whether a Mosaic
kernel was lowered or the order fell through to plain XLA (as it does for the
SparseCore kernels before TPU v7: pass `--chip 7x` to check those).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
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
