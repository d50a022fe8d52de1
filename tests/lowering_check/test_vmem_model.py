"""What the VMEM estimate counts beside the buffers, and how the check compares it with a limit
(tpu_kernels/lowering_check/temporaries.py, vmem.verdict): the facts a v5e showed (issue 45)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from tpu_kernels.lowering.target import chip
from tpu_kernels.lowering_check import temporaries, vmem

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


def test_buffers_of_exactly_the_limit_fit_and_the_verdict_says_which_limit_and_by_how_much():
    v5e = chip("v5e")
    # 4 blocks of 4 MiB: 16.0 MiB, and the v5e compiles it (bench/reports/chip_corpus_v5e.json)
    exactly = vmem.verdict(_footprint(_copy, 1024, 4096, 512), v5e)
    assert exactly.fits and exactly.estimate == 16 * MIB and exactly.limit == 16 * MIB and exactly.margin == 0
    assert exactly.describe() == "clears the 16.0 MiB default scoped VMEM limit of a TPU v5e by 0 B"
    over = vmem.verdict(_footprint(_copy, 1088, 4096, 544), v5e)  # 17.0 MiB: refused
    assert not over.fits and over.margin == -MIB
    assert over.describe() == "misses the 16.0 MiB default scoped VMEM limit of a TPU v5e by 1.0 MiB"
    small = vmem.verdict(_footprint(_copy, 1024, 4096, 128), v5e)  # 4 MiB
    assert small.fits and small.margin == 12 * MIB
    assert small.describe() == "clears the 16.0 MiB default scoped VMEM limit of a TPU v5e by 12.0 MiB"
    raised = vmem.verdict(_footprint(_copy, 8192, 4096, 1024, vmem_limit_bytes=100 * MIB), v5e)
    assert (
        raised.fits and raised.limit == 100 * MIB and "its vmem_limit_bytes (100.0 MiB)" in raised.limit_name
    )
    core = vmem.verdict(  # 256 MiB: past the core's 128 MiB, which no limit lifts
        _footprint(_copy, 8192, 4096, 4096, dtype=jnp.float32, vmem_limit_bytes=100 * MIB), v5e
    )
    assert not core.fits and core.limit == v5e.vmem_bytes


def _bwd(y_ref, dy_ref, o_ref):  # softmax's backward: two bf16 blocks widened, both needed after the sum
    y, dy = y_ref[...].astype(jnp.float32), dy_ref[...].astype(jnp.float32)
    o_ref[...] = (y * (dy - jnp.sum(y * dy, axis=-1, keepdims=True))).astype(o_ref.dtype)


def _bwd_eqn(dtype, block_rows=256, cols=4096):
    spec = pl.BlockSpec((block_rows, cols), lambda i: (i, 0))
    x = jax.ShapeDtypeStruct((4096, cols), dtype)

    def f(y, dy):
        return pl.pallas_call(
            _bwd, out_shape=x, grid=(4096 // block_rows,), in_specs=[spec, spec], out_specs=spec
        )(y, dy)

    [eqn] = vmem.traced_pallas_calls(f, x, x)
    return eqn


def test_block_reads_are_read_again_and_a_second_upcast_is_held_at_its_read_width():
    f32_block = 256 * 4096 * 4
    # float32: y and dy are block reads, read again after the sum (the v5e held ~0 of them)
    assert temporaries.estimate(_bwd_eqn(jnp.float32)) == 0
    # bfloat16: the larger upcast whole, the other at bf16 width (the v5e held 1.21 f32 blocks)
    bf16 = temporaries.body_values(_bwd_eqn(jnp.bfloat16))
    assert sorted(v.upcast_of for v in bf16.values if v.upcast_of) == [f32_block // 2] * 2
    assert temporaries.held(bf16) == f32_block + f32_block // 2


def _matmul(a_ref, b_ref, o_ref):
    o_ref[...] = jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32).astype(o_ref.dtype)


def test_a_matmuls_float32_result_is_held():
    a = jax.ShapeDtypeStruct((1024, 1024), jnp.bfloat16)
    [eqn] = vmem.traced_pallas_calls(
        lambda a, b: pl.pallas_call(_matmul, out_shape=a)(a, b), a, a
    )  # a v5e held 2.36 MiB beside the buffers of a 1024^3 bf16 matmul block: counted 4 MiB
    assert temporaries.estimate(eqn) == 1024 * 1024 * 4


def test_a_matmuls_float32_result_is_held_up_to_4_mib():
    # a 2048x2048 product (16 MiB in float32): the v5e's allocation was the buffers' sum (held 0);
    # counted up to temporaries.MATMUL_RESULT_HELD_MAX
    a = jax.ShapeDtypeStruct((2048, 512), jnp.bfloat16)
    b = jax.ShapeDtypeStruct((512, 2048), jnp.bfloat16)
    out = jax.ShapeDtypeStruct((2048, 2048), jnp.bfloat16)
    [eqn] = vmem.traced_pallas_calls(lambda a, b: pl.pallas_call(_matmul, out_shape=out)(a, b), a, b)
    assert temporaries.estimate(eqn) == temporaries.MATMUL_RESULT_HELD_MAX == 4 * MIB


def _through_scratch(x_ref, o_ref, s_ref):  # written, then read, at every step
    s_ref[: x_ref.shape[0], :] = x_ref[...].astype(jnp.float32) * 2.0
    o_ref[...] = (s_ref[: x_ref.shape[0], :] + 1.0).astype(o_ref.dtype)


def _accumulate(x_ref, o_ref, s_ref):  # read before written: carries state across steps
    s_ref[...] += x_ref[...].astype(jnp.float32)
    o_ref[...] = s_ref[...].astype(o_ref.dtype)


def _normalize_through_scratch(x_ref, o_ref, s_ref):  # its value outlives the row mean
    s_ref[...] = x_ref[...].astype(jnp.float32)
    m = jnp.mean(s_ref[...], axis=-1, keepdims=True)
    o_ref[...] = (s_ref[...] / m).astype(o_ref.dtype)


def _with_scratch(body, x, scratch_rows):
    rows, cols = x.shape
    spec = pl.BlockSpec((256, cols), lambda i: (i, 0))
    return pl.pallas_call(
        body,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(rows // 256,),
        in_specs=[spec],
        out_specs=spec,
        scratch_shapes=[pltpu.VMEM((scratch_rows, cols), jnp.float32)],
    )(x)


def test_scratch_written_before_read_every_step_is_not_held():
    # the v5e compiled 24-96 MiB of such scratch beside 8-16 MiB of blocks (synthetic.with_scratch)
    x = jax.ShapeDtypeStruct((8192, 4096), jnp.bfloat16)
    blocks = 4 * 256 * 4096 * 2
    [k] = vmem.kernel_footprints(functools.partial(_with_scratch, _through_scratch, scratch_rows=2048), x)
    assert k.bytes == blocks and k.buffers[-1].what == "scratch 0 (not held)"
    # state carried from step to step, or a value kept across a reduction: held whole
    for body in (_accumulate, _normalize_through_scratch):
        [k] = vmem.kernel_footprints(functools.partial(_with_scratch, body, scratch_rows=256), x)
        assert k.bytes == blocks + 256 * 4096 * 4, body.__name__


def test_many_values_live_at_once_spill_registers():
    # 9 live float32 values: refused at exactly 16.0 MiB of buffers; 5 compiled there
    from tpu_kernels.chip import synthetic

    x = jax.ShapeDtypeStruct((8192, 4096), jnp.bfloat16)
    for live, spilled in ((4, 0), (8, temporaries.SPILL_BYTES)):
        [k] = vmem.kernel_footprints(functools.partial(synthetic.live_temporaries, block_rows=512, live=live), x)
        assert k.bytes == 16 * MIB and k.temporaries == spilled, live
        assert vmem.verdict(k, chip("v5e")).fits == (not spilled)
