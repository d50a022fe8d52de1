"""What the VMEM estimate counts beside the buffers, and how the check compares it with a limit
(tpu_kernels/check/temporaries.py, vmem.verdict): the facts a v5e showed (issue 45)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from tpu_kernels.check import temporaries, vmem
from tpu_kernels.lowering.chips import chip

MIB = 2**20


def _rows(body, x, block_rows, vmem_limit_bytes=None):
    rows, cols = x.shape
    spec = pl.BlockSpec((block_rows, cols), lambda i: (i, 0))
    return pl.pallas_call(
        body,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(pl.cdiv(rows, block_rows),),
        in_specs=[spec],
        out_specs=spec,
        compiler_params=pltpu.CompilerParams(vmem_limit_bytes=vmem_limit_bytes),
    )(x)


def _normalize(x_ref, o_ref):  # the float32 upcast is needed by the row mean and after it
    x = x_ref[...].astype(jnp.float32)
    o_ref[...] = (x / jnp.mean(x, axis=-1, keepdims=True)).astype(o_ref.dtype)


def _scale(x_ref, o_ref):  # an elementwise chain: nothing outlives a reduction
    x = x_ref[...].astype(jnp.float32)
    o_ref[...] = (x * 2.0 + 1.0).astype(o_ref.dtype)


def _copy(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def _footprint(body, rows, cols, block_rows, dtype=jnp.bfloat16, **kw):
    x = jax.ShapeDtypeStruct((rows, cols), dtype)
    [k] = vmem.kernel_footprints(functools.partial(_rows, body, block_rows=block_rows, **kw), x)
    return k


@settings(max_examples=15, deadline=None)
@given(block_rows=st.sampled_from([8, 64, 256, 512]), cols=st.sampled_from([128, 1024, 4096]))
def test_a_value_held_across_a_reduction_is_counted_an_elementwise_chain_is_not(block_rows, cols):
    f32_block = block_rows * cols * 4
    assert _footprint(_normalize, 4096, cols, block_rows).temporaries == f32_block
    assert _footprint(_scale, 4096, cols, block_rows).temporaries == 0


def test_the_body_values_follow_program_order_through_branches():
    def body(x_ref, o_ref):
        x = x_ref[...].astype(jnp.float32)

        @pl.when(pl.program_id(0) == 0)
        def _():
            o_ref[...] = (x - jnp.max(x, axis=-1, keepdims=True)).astype(o_ref.dtype)

    [eqn] = vmem.traced_pallas_calls(
        functools.partial(_rows, body, block_rows=256), jax.ShapeDtypeStruct((1024, 512), jnp.bfloat16)
    )
    assert temporaries.estimate(eqn) == 256 * 512 * 4  # x, made outside the branch, across its max


def test_a_one_step_grid_single_buffers_its_blocks():
    one = _footprint(_copy, 768, 4096, 768)  # the v5e compiles it: 24 MiB if double-buffered
    two = _footprint(_copy, 1536, 4096, 768)
    assert one.grid == (1,) and {b.copies for b in one.buffers} == {1} and one.bytes == 12 * MIB
    assert {b.copies for b in two.buffers} == {2} and two.bytes == 24 * MIB
    assert vmem.verdict(one, chip("v5e")).fits and not vmem.verdict(two, chip("v5e")).fits


def test_buffers_of_exactly_the_limit_fail_and_the_verdict_says_which_limit_and_by_how_much():
    v5e = chip("v5e")
    exactly = vmem.verdict(_footprint(_copy, 1024, 4096, 512), v5e)  # 4 blocks of 4 MiB: 16.0 MiB
    assert not exactly.fits and exactly.estimate == 16 * MIB and exactly.limit == 16 * MIB
    assert exactly.margin == -v5e.headroom_bytes
    assert exactly.describe().startswith("misses the 16.0 MiB default scoped VMEM limit of a TPU v5e by ")
    small = vmem.verdict(_footprint(_copy, 1024, 4096, 128), v5e)  # 4 MiB
    assert small.fits and small.margin == 12 * MIB - v5e.headroom_bytes
    assert small.describe().startswith(
        "clears the 16.0 MiB default scoped VMEM limit of a TPU v5e by 11.0 MiB"
    )
    raised = vmem.verdict(_footprint(_copy, 8192, 4096, 1024, vmem_limit_bytes=100 * MIB), v5e)
    assert (
        raised.fits and raised.limit == 100 * MIB and "its vmem_limit_bytes (100.0 MiB)" in raised.limit_name
    )
    core = vmem.verdict(_footprint(_copy, 8192, 4096, 4096, vmem_limit_bytes=100 * MIB), v5e)  # 128 MiB
    assert not core.fits and core.limit == v5e.vmem_bytes
