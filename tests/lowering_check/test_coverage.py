"""`tpu-kernels check`'s coverage check: output elements no grid step writes, blocks past the array."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from tests.lowering_check import demo_kernels as demo
from tpu_kernels.cli import main
from tpu_kernels.lowering_check import check_op, coverage, vmem

DEMO = "tests.lowering_check.demo_kernels"


def _copy(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def findings(grid, block, index_map, shape, *, in_map=None, aliases=None, in_block=None):
    """The coverage findings of a copy kernel over an f32 array of `shape`."""

    def f(x):
        in_spec = pl.BlockSpec(in_block or block, in_map or index_map)
        return demo.blocked(_copy, x, grid, pl.BlockSpec(block, index_map), in_spec=in_spec, aliases=aliases)

    [eqn] = vmem.traced_pallas_calls(f, jax.ShapeDtypeStruct(shape, jnp.float32))
    found, warnings = coverage.check_kernel(eqn)
    assert not warnings, warnings
    return [(f.kind, f.message) for f in found]


def test_a_floor_divided_grid_fails_the_check_with_the_rows_named(capsys):
    assert main(["check", DEMO, "--filter", "floor_grid|cdiv_grid"]) == 1
    out = capsys.readouterr().out
    assert "FAILED   check_demo::floor_grid" in out
    assert (
        "error (coverage): kernel _double: rows 8-11 of output 0 (shape 12x128) are never written: "
        "grid=(1,), block (8, 128); use grid=(pl.cdiv(12, 8),)." in out
    )
    assert "ok       check_demo::cdiv_grid" in out  # a partial last block is legal


def test_a_block_entirely_past_the_array_is_out_of_bounds():
    report = check_op(demo.past_the_end)
    [result] = report.examples
    assert report.status == "failed" and result.lowered
    kinds = [p.kind for p in result.problems]
    assert kinds == ["out-of-bounds", "out-of-bounds"]  # the input's read and the output's write
    assert "input 0 (shape 12x128, block (8, 128)) gives block 2 along dimension 0 at grid point (2,): " in (
        result.problems[0].message
    )
    assert "rows 16-23, entirely outside the array" in result.problems[0].message
    assert "on TPU that block writes memory outside" in result.problems[1].message


def test_full_coverage_passes_in_every_layout():
    assert findings((2, 3), (8, 128), lambda i, j: (i, j), (16, 384)) == []
    assert findings((3, 2), (8, 128), lambda j, i: (i, j), (16, 384)) == []  # axes swapped
    assert findings((4,), (None, 128), lambda i: (i, 0), (4, 128)) == []  # squeezed rows
    assert findings((), (4, 128), lambda: (0, 0), (4, 128)) == []  # no grid: one step
    assert findings((2, 2), (8, 128), lambda i, j: (i + j, 0), (24, 128)) == []  # not a product
    # revisiting blocks (a reduction axis) is fine: coverage, not uniqueness
    assert findings((2, 5), (8, 128), lambda i, k: (i, 0), (16, 128), in_map=lambda i, k: (i, 0)) == []


def test_the_gap_is_named_in_each_dimension():
    assert findings((2, 2), (8, 128), lambda i, j: (i, j), (16, 384)) == [
        (
            "coverage",
            "columns 256-383 of output 0 (shape 16x384) are never written: grid=(2, 2), "
            "block (8, 128); use grid=(2, pl.cdiv(384, 128)).",
        )
    ]
    [(_, message)] = findings((3,), (None, 128), lambda i: (i, 0), (4, 128))
    assert message.startswith("row 3 of output 0 (shape 4x128) is never written") and "grid=(4,)" in message
    [(_, message)] = findings((0,), (8, 128), lambda i: (i, 0), (4, 128))
    assert message.startswith("all of output 0 (shape 4x128) is never written: grid=(0,)")
    [(_, message)] = findings((2,), (8, 128), lambda i: (0, 0), (16, 128))  # the map ignores the grid
    assert message.startswith("rows 8-15 of output 0") and "visit all pl.cdiv(16, 8) = 2 blocks" in message
    [(_, message)] = findings((2,), (8, 128), lambda i: (2 * i, 0), (32, 128))  # every other block
    assert message.startswith(
        "2 of 4 blocks of output 0 (shape 32x128) are never written, the first at rows 8-15"
    )


def test_an_output_aliased_to_an_input_may_be_written_in_part():
    # In-place update of rows 0-7: rows 8-15 keep the input's values.
    assert findings((1,), (8, 128), lambda i: (i, 0), (16, 128), aliases={0: 0}) == []


def test_large_grids_are_checked_per_axis():
    assert coverage.MAX_POINTS < 401 * 300
    assert findings((401, 300), (8, 128), lambda i, j: (i, j), (8 * 401, 128 * 300)) == []
    [(kind, message)] = findings((400, 300), (8, 128), lambda i, j: (i, j), (8 * 400 + 4, 128 * 300))
    assert kind == "coverage"
    assert message == (
        "rows 3200-3203 of output 0 (shape 3204x38400) are never written: grid=(400, 300), "
        "block (8, 128); use grid=(pl.cdiv(3204, 8), 300)."
    )
    [(kind, message), _output] = findings((402, 300), (8, 128), lambda i, j: (i, j), (8 * 401, 128 * 300))
    assert kind == "out-of-bounds" and "input 0" in message
    assert "gives block 401 along dimension 0 at grid point (401, 0)" in message


def test_large_grids_with_maps_the_model_does_not_fit_are_reported_as_unchecked():
    def f(x):
        spec = pl.BlockSpec((8, 128), lambda i, j: (i, (i * j) % 300))  # not a sum of per-axis terms
        return demo.blocked(_copy, x, (401, 300), spec)

    [eqn] = vmem.traced_pallas_calls(f, jax.ShapeDtypeStruct((8 * 401, 128 * 300), jnp.float32))
    found, warnings = coverage.check_kernel(eqn)
    assert found == [] and len(warnings) == 2
    assert "coverage and bounds of input 0 not checked: its grid has 120300 points" in warnings[0]


def _attention_kernels(seq=1280, block=256):
    """The shipped attention's causal forward, its step table built at trace time."""
    from tpu_kernels.kernels.attention import pallas

    spec = jax.ShapeDtypeStruct((1, 2, seq, 64), jnp.bfloat16)
    fn = lambda q, k, v: pallas.attention_out(q, k, v, causal=True, block_q=block, block_k=block)  # noqa: E731
    return vmem.traced_kernels(fn, spec, spec, spec)


def test_index_maps_that_read_a_step_table_fixed_at_trace_time_are_checked():
    """Attention's causal walk reads its blocks from scalar-prefetch tables the trace fixed: the
    check evaluates its index maps with them and finds every output block written. Without the
    tables' values it cannot, and says nothing (as for any table read at run time)."""
    ((eqn, operands),) = _attention_kernels()
    assert coverage.check_kernel(eqn, operands) == ([], [])
    assert coverage.check_kernel(eqn) == ([], [])


def test_a_step_table_that_skips_a_q_block_leaves_its_output_unwritten(monkeypatch):
    from tpu_kernels.kernels.attention import pallas

    table = pallas._table

    def short(plan, q_major):  # the last q block's steps dropped
        t = table(plan, q_major)
        return t[:, (t[0] >> 16) != plan.nq - 1] if t is not None and q_major else t

    monkeypatch.setattr(pallas, "_table", short)
    ((eqn, operands),) = _attention_kernels(seq=1024, block=256)
    findings, _ = coverage.check_kernel(eqn, operands)
    assert [f.kind for f in findings] == ["coverage"] and "never written" in findings[0].message


def test_a_table_sliced_by_a_scan_is_not_taken_for_the_whole_table():
    """A constant a scan slices reaches its body as one row per trip: the body's kernel sees an
    operand the trace did not fix (None), never the whole table in place of the row."""
    from jax.experimental.pallas import tpu as pltpu

    from tpu_kernels.lowering import jaxprs

    def copy_row(row, x):  # a kernel reading its block index from a prefetched row
        def kernel(t_ref, x_ref, o_ref):
            o_ref[...] = x_ref[...]

        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=1,
                grid=(2,),
                in_specs=[pl.BlockSpec((8, 128), lambda i, t: (t[i], 0))],
                out_specs=pl.BlockSpec((8, 128), lambda i, t: (i, 0)),
            ),
        )(row, x)

    table = jnp.asarray([[0, 1], [1, 0], [1, 1]], jnp.int32)
    x = jax.ShapeDtypeStruct((16, 128), jnp.float32)

    def f(x):
        return jax.lax.scan(lambda c, row: (c, copy_row(row, x)), 0, table)[1]

    row = jnp.asarray([0, 1], jnp.int32)

    def g(x):  # the same kernel given a constant row through a jit: fixed, and found
        return jax.jit(copy_row)(row, x)

    ((scanned,),) = [list(jaxprs.constant_operands(jax.make_jaxpr(f)(x)).values())]
    assert scanned[0] is None
    ((called,),) = [list(jaxprs.constant_operands(jax.make_jaxpr(g)(x)).values())]
    assert called[0] is not None and list(called[0]) == [0, 1]


def test_a_step_table_on_a_grid_too_large_to_evaluate_is_said_to_be_unchecked(monkeypatch):
    monkeypatch.setattr(coverage, "MAX_POINTS", 4)
    ((eqn, operands),) = _attention_kernels()
    findings, warnings = coverage.check_kernel(eqn, operands)
    assert findings == [] and warnings and all("not checked" in w and "scalar-prefetch" in w for w in warnings)
