"""The dimension-semantics lint and state carried through scratch memory: a grid axis whose steps
carry a value in a scratch buffer must run in order ("arbitrary"), and such an axis is never
suggested for "parallel" (lowering_check/scratch.py, lowering_check/semantics.py)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import pytest
import torch
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from tpu_kernels import interpret_mode, tpu_kernel
from tpu_kernels.cli import main
from tpu_kernels.lowering_check import check_op
from tpu_kernels.lowering_check.scratch import carried
from tpu_kernels.lowering_check.semantics import check_semantics
from tpu_kernels.lowering_check.vmem import traced_pallas_calls

F32 = jnp.float32


def _cumsum_kernel(x_ref, o_ref, carry_ref):
    @pl.when(pl.program_id(1) == 0)
    def _start():
        carry_ref[...] = jnp.zeros_like(carry_ref)

    rows = jax.lax.broadcasted_iota(jnp.int32, (128, 128), 0)
    cols = jax.lax.broadcasted_iota(jnp.int32, (128, 128), 1)
    within = jnp.dot(x_ref[...], (rows <= cols).astype(F32), preferred_element_type=F32)
    out = within + carry_ref[...]  # the running sum of the blocks before this one
    o_ref[...] = out
    carry_ref[...] = jnp.broadcast_to(out[:, -1:], carry_ref.shape)


def cumsum(x, semantics):
    """Running sums along the rows, one (8, 128) block a step; axis 1 carries the sum so far."""
    spec = pl.BlockSpec((8, 128), lambda i, j: (i, j))
    return pl.pallas_call(
        _cumsum_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(x.shape[0] // 8, x.shape[1] // 128),
        in_specs=[spec],
        out_specs=spec,
        scratch_shapes=[pltpu.VMEM((8, 128), F32)],
        compiler_params=None if semantics is None else pltpu.CompilerParams(dimension_semantics=semantics),
    )(x)


def _examples():
    return [((jax.ShapeDtypeStruct((16, 512), "float32"),), {})]


@tpu_kernel("carried_state::cumsum_carry_parallel", examples=_examples)
def cumsum_carry_parallel(x: torch.Tensor) -> torch.Tensor:
    return cumsum(x, ("parallel", "parallel"))


@tpu_kernel("carried_state::cumsum", examples=_examples)
def cumsum_right(x: torch.Tensor) -> torch.Tensor:
    return cumsum(x, ("parallel", "arbitrary"))


def _findings(fn, *shape):
    [eqn] = traced_pallas_calls(fn, jax.ShapeDtypeStruct(shape, F32))
    return check_semantics(eqn)


def test_a_carry_axis_marked_parallel_fails_with_the_axis_and_why(capsys):
    assert main(["check", __name__, "--races", "--filter", "cumsum_carry_parallel"]) == 1
    out = capsys.readouterr().out
    assert (
        "FAILED   carried_state::cumsum_carry_parallel  1 of 1 calls lowered, 1 of them failed after lowering (semantics)"
        in out
    )
    assert (
        "error (semantics): kernel _cumsum_kernel: grid axis 1 is marked 'parallel', but the body carries "
        "state from step to step along it: scratch buffer 0 is read at a step before that step writes it, "
        "so it holds what an earlier step left, and is written afresh only when pl.program_id(1) == 0." in out
    ), out
    assert "no races" not in out, out


def test_the_right_kernel_passes_and_is_not_told_to_mark_its_carry_axis_parallel():
    report = check_op(cumsum_right)
    [example] = report.examples
    assert report.status == "ok" and not example.problems, report
    assert not example.warnings, example.warnings
    # left unmarked, axis 0 (independent rows) is the one to mark parallel, never axis 1
    findings = _findings(functools.partial(cumsum, semantics=None), 16, 512)
    assert [(f.kind, f.axis) for f in findings] == [("hint", 0)], findings


def test_what_the_verdicts_stand_on_the_carry_axis_split_between_two_cores_is_wrong():
    x = torch.randn(16, 512, generator=torch.Generator().manual_seed(0))
    want = torch.cumsum(x.double(), 1)
    with interpret_mode("tpu"):
        right, wrong = cumsum_right(x), cumsum_carry_parallel(x)
    torch.testing.assert_close(right.double(), want, rtol=1e-5, atol=1e-4)
    assert wrong.isnan().any()


def _global_sum_kernel(x_ref, o_ref, acc_ref):
    @pl.when((pl.program_id(0) == 0) & (pl.program_id(1) == 0))
    def _start():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += x_ref[...]
    o_ref[...] = acc_ref[...]


def _temp_kernel(x_ref, o_ref, tmp_ref):
    tmp_ref[...] = x_ref[...] * 2  # written before it is read at every step: no state carried
    o_ref[...] = tmp_ref[...] + 1


def _never_started_kernel(x_ref, o_ref, acc_ref):
    acc_ref[...] += x_ref[...]  # reads what the previous step left, and nothing starts it afresh
    o_ref[...] = acc_ref[...]


def _scratch_call(body, x, semantics):
    spec = pl.BlockSpec((8, 128), lambda i, j: (i, j))
    return pl.pallas_call(
        body,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(x.shape[0] // 8, x.shape[1] // 128),
        in_specs=[spec],
        out_specs=spec,
        scratch_shapes=[pltpu.VMEM((8, 128), F32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=semantics),
    )(x)


@pytest.mark.parametrize(
    ("body", "carries", "why"),
    [
        (_cumsum_kernel, {1}, "written afresh only when pl.program_id(1) == 0"),
        (
            _global_sum_kernel,
            {0, 1},
            "written afresh only when pl.program_id(0) == 0 and pl.program_id(1) == 0",
        ),
        (_never_started_kernel, {0, 1}, "and nothing writes it afresh"),
        (_temp_kernel, set(), None),
    ],
)
def test_which_axes_carry_state(body, carries, why):
    fn = functools.partial(_scratch_call, body, semantics=("parallel", "parallel"))
    [eqn] = traced_pallas_calls(fn, jax.ShapeDtypeStruct((16, 256), F32))
    found = carried(eqn)
    assert found.axes(2) == carries and not found.unknown, found
    errors = [f for f in check_semantics(eqn) if f.kind == "error"]
    assert [f.axis for f in errors] == sorted(carries), errors
    if why:
        assert all(why in f.message for f in errors), errors
    hints = _findings(functools.partial(_scratch_call, body, semantics=("arbitrary", "arbitrary")), 16, 256)
    assert {f.axis for f in hints} == {0, 1} - carries  # never a hint for a carry axis


def _data_started_kernel(x_ref, o_ref, acc_ref):
    @pl.when(x_ref[0, 0] > 0)  # started afresh where the data says (splash attention's bounds_start)
    def _start():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += x_ref[...]
    o_ref[...] = acc_ref[...]


def _odd_started_kernel(x_ref, o_ref, acc_ref):
    @pl.when(pl.program_id(1) % 2 == 0)
    def _start():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += x_ref[...]
    o_ref[...] = acc_ref[...]


@pytest.mark.parametrize("body", [_data_started_kernel, _odd_started_kernel])
def test_a_buffer_started_afresh_under_a_test_it_cannot_read_is_unknown_neither_failed_nor_hinted(body):
    """Where the state starts afresh depends on data (or on more than a zero index): the check
    cannot say which axes carry it, so it fails none (Tokamax's splash attention and KDA
    kernels start theirs from a scalar-prefetched flag on 'parallel' axes, rightly) and
    suggests none."""
    for semantics in (("parallel", "parallel"), ("arbitrary", "arbitrary")):
        fn = functools.partial(_scratch_call, body, semantics=semantics)
        [eqn] = traced_pallas_calls(fn, jax.ShapeDtypeStruct((16, 256), F32))
        assert 0 in carried(eqn).unknown, carried(eqn)
        assert check_semantics(eqn) == [], semantics


def _dma_kernel(x_hbm, o_ref, buf_ref, sem):
    copy = pltpu.make_async_copy(x_hbm.at[pl.ds(pl.program_id(0) * 8, 8)], buf_ref, sem)
    copy.start()
    copy.wait()
    o_ref[...] = buf_ref[...]


def test_scratch_filled_by_a_dma_is_not_followed_so_no_axis_is_suggested_parallel():
    def fn(x):
        return pl.pallas_call(
            _dma_kernel,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid=(x.shape[0] // 8,),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
            scratch_shapes=[pltpu.VMEM((8, 128), F32), pltpu.SemaphoreType.DMA],
        )(x)

    [eqn] = traced_pallas_calls(fn, jax.ShapeDtypeStruct((16, 128), F32))
    found = carried(eqn)
    assert 0 in found.unknown, found
    assert check_semantics(eqn) == []  # neither an error nor a "mark it parallel" it cannot stand behind
