"""What the cost model reads from a kernel body (`autotuner/body.py`): each dot and each vector
operation counted on the grid steps that run it, `pl.when` predicates evaluated over the grid."""

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from tpu_kernels.autotuner import body
from tpu_kernels.lowering_check import vmem


def _read(fn, *specs) -> body.Body:
    (eqn,) = vmem.traced_pallas_calls(fn, *specs)
    return body.read(eqn)


def _matmul(a, b, bm=128, bn=128, bk=128):
    (m, k), n = a.shape, b.shape[1]

    def kernel(a_ref, b_ref, o_ref, acc_ref):
        @pl.when(pl.program_id(2) == 0)
        def _():
            acc_ref[...] = jnp.zeros_like(acc_ref)

        acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

        @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
        def _():
            o_ref[...] = acc_ref[...]

    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32),
        grid=(m // bm, n // bn, k // bk),
        in_specs=[pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)), pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
    )(a, b)


def test_a_when_block_counts_on_the_steps_its_predicate_holds():
    spec = jax.ShapeDtypeStruct((256, 512), jnp.float32)
    b = _read(_matmul, spec, jax.ShapeDtypeStruct((512, 256), jnp.float32))
    assert b.steps == 2 * 2 * 4 and b.evaluated
    (dot,) = b.dots
    assert (dot.m, dot.n, dot.k, dot.steps) == (128, 128, 128, 16)
    tile = 128 * 128 // 1024  # f32 vregs of one (128, 128) block: 16
    every_step = 6 * tile  # a, b and acc loaded, the dot's result, the sum, stored
    at_first_k, at_last_k = 2 * tile, 2 * tile  # zeros made and stored; acc loaded and stored
    assert b.vreg_ops == 16 * every_step + 4 * (at_first_k + at_last_k)


def _skip_upper(x, *, block):
    """A causal-style body: the dot runs where the column block is at most the row block."""
    n = x.shape[0]

    def kernel(x_ref, o_ref):
        i, j = pl.program_id(0), pl.program_id(1)

        @pl.when(j == 0)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)

        @pl.when(j * block <= i * block + block - 1)
        def _():
            o_ref[...] += jnp.dot(x_ref[...], x_ref[...], preferred_element_type=jnp.float32)

    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((n, block), jnp.float32),
        grid=(n // block, n // block),
        in_specs=[pl.BlockSpec((block, block), lambda i, j: (i, jnp.minimum(i, j)))],
        out_specs=pl.BlockSpec((block, block), lambda i, j: (i, 0)),
    )(x)


@pytest.mark.parametrize("blocks", [2, 4, 8])
def test_blocks_above_the_diagonal_cost_no_flops(blocks):
    x = jax.ShapeDtypeStruct((128 * blocks, 128 * blocks), jnp.float32)
    b = _read(lambda x: _skip_upper(x, block=128), x)
    (dot,) = b.dots
    assert b.steps == blocks**2 and dot.steps == blocks * (blocks + 1) // 2


def test_a_predicate_read_from_memory_counts_every_branch_on_every_step():
    def kernel(flag_ref, x_ref, o_ref):
        @pl.when(flag_ref[0] > 0)  # known only when the kernel runs
        def _():
            o_ref[...] = x_ref[...] * 2.0

    def fn(flag, x):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid=(4,),
            in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), pl.BlockSpec((8, 128), lambda i: (i, 0))],
            out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
        )(flag, x)

    b = _read(fn, jax.ShapeDtypeStruct((1,), jnp.int32), jax.ShapeDtypeStruct((32, 128), jnp.float32))
    assert not b.evaluated
    assert b.vreg_ops == 4 * 3  # load, product, store of one vreg, on all 4 steps


@pytest.mark.parametrize(
    "shape,dtype,vregs",
    [
        ((8, 128), jnp.float32, 1),
        ((256, 1), jnp.float32, 32),  # a column pads to 128 lanes
        ((16, 128), jnp.bfloat16, 1),  # 2-byte values pack 16 sublanes
        ((2, 8, 256), jnp.float32, 4),
        ((), jnp.float32, 0),  # a scalar is the scalar unit's
    ],
)
def test_an_array_costs_its_native_tiles(shape, dtype, vregs):
    assert body._vregs(jax.ShapeDtypeStruct(shape, dtype)) == vregs


@pytest.mark.parametrize("seq, block", [(2048, 512), (1280, 256)])
def test_a_step_table_fixed_at_trace_time_is_read_so_each_dot_counts_where_it_runs(seq, block):
    """The shipped attention's causal walk reads its steps from a scalar-prefetch table built
    at trace time: given the trace's constants, the body reads the table, and each branch's dots
    count on exactly the steps that take it (the diagonal's body, in row chunks at 512-blocks,
    on the diagonal's blocks; the unmasked one below it; the masked body of other edge blocks,
    which a causal square has none of, on no step). Without them the predicates are unknown, and both branches count on
    every step: an upper bound, said so (`evaluated` False)."""
    from tpu_kernels.kernels.attention import pallas

    spec = jax.ShapeDtypeStruct((1, 2, seq, 128), jnp.bfloat16)
    fn = lambda q, k, v: pallas.attention_out(q, k, v, causal=True, block_q=block, block_k=block)  # noqa: E731
    ((eqn, operands),) = vmem.traced_kernels(fn, spec, spec, spec)
    n = seq // block
    pairs, diagonal = 2 * n * (n + 1) // 2, 2 * n  # two heads
    read = body.read(eqn, operands)
    assert read.steps == pairs and read.evaluated
    steps = sorted(d.steps for d in read.dots)
    plan = pallas._plan(spec, spec, True, None, block, block, forward=True)
    chunks = block // plan.sub if plan.sub else 1  # the diagonal's body runs its rows in chunks (`_run`)
    assert chunks == (2 if block == 512 else 1)
    # q k^T and p v in each body, per chunk on the diagonal's
    assert steps == [diagonal] * 2 * chunks + [pairs - diagonal] * 2
    unknown = body.read(eqn)
    # every branch's dots on every step: with chunks, the diagonal's chunked body, the masked
    # body for the other edge blocks and the unmasked one; without, the masked and unmasked
    branches = 2 * chunks + 4 if chunks > 1 else 4
    assert not unknown.evaluated and sorted(d.steps for d in unknown.dots) == [pairs] * branches
