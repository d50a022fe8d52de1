"""VMEM the check counts per grid step and the limit it counts against, pinned: each chip's
default scoped limit at its documented value, and which blocks the pipeline double-buffers."""

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from tpu_kernels.lowering.target import SCOPED_VMEM_BYTES, TARGET_CHIPS, chip
from tpu_kernels.lowering_check import kernel_footprints

MIB = 2**20

# Mosaic's default scoped VMEM limit (XLA's --xla_tpu_scoped_vmem_limit_kib default) per
# generation. Sources: JAX's Pallas TPU docs (16 MiB up to v5e and v5p); Tokamax 0.0.17,
# ops/proj_and_save_state/pallas_mosaic_tpu.py ("XLA's default 32 MiB scoped VMEM limit") for
# v6e on; the 8th generation's is not published (32 MiB assumed, lowering/target.py).
DOCUMENTED = {
    **dict.fromkeys(("v2", "v3", "v4i", "v4", "v5e", "v5p"), 16 * MIB),
    **dict.fromkeys(("v6e", "7", "7x", "8i", "8t"), 32 * MIB),
}


def test_each_chips_default_scoped_limit_is_its_documented_value():
    assert SCOPED_VMEM_BYTES == DOCUMENTED
    known = {v.value for v in pltpu.ChipVersion}  # JAX 0.10.2 knows no 8t: chip() refuses it there
    for name in (n for n in DOCUMENTED if n in known):
        target = chip(name)
        assert target.scoped_vmem_bytes == DOCUMENTED[name], name
        assert target.scoped_vmem_bytes <= target.vmem_bytes, name  # a limit within the chip's VMEM
    assert set(TARGET_CHIPS) <= set(DOCUMENTED)


def _footprint(in_spec, shape=(64, 256), grid=(4,)):
    def body(x_ref, o_ref):
        o_ref[...] = jnp.zeros_like(o_ref) + jnp.sum(x_ref[...])

    def kernel(x):
        return pl.pallas_call(
            body,
            out_shape=jax.ShapeDtypeStruct((8 * grid[0], 256), jnp.float32),
            grid=grid,
            in_specs=[in_spec],
            out_specs=pl.BlockSpec((8, 256), lambda i: (i, 0)),
        )(x)

    [k] = kernel_footprints(kernel, jax.ShapeDtypeStruct(shape, jnp.float32))
    return {b.what: (b.copies, b.bytes) for b in k.buffers}


@pytest.mark.parametrize(
    ("spec", "copies"),
    [
        # the whole array at a constant block index: fetched once, Mosaic single-buffers it
        (pl.BlockSpec((64, 256), lambda i: (0, 0)), 1),
        # a part of the array at a constant index: still double-buffered
        (pl.BlockSpec((8, 256), lambda i: (0, 0)), 2),
        # a moving block: the next one is copied in while this one is computed
        (pl.BlockSpec((8, 256), lambda i: (i, 0)), 2),
    ],
)
def test_only_a_whole_array_block_at_a_constant_index_is_single_buffered(spec, copies):
    got = _footprint(spec)
    block = spec.block_shape[0] * 256 * 4
    assert got["input 0"] == (copies, copies * block)
    assert got["output 0"] == (2, 2 * 8 * 256 * 4)
