"""`tpu-kernels check`: the dimension-semantics lint and the per-chip scoped VMEM limit."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import torch
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from tpu_kernels import tpu_kernel
from tpu_kernels.cli import main
from tpu_kernels.lowering.target import SCOPED_VMEM_BYTES, TARGET_CHIPS
from tpu_kernels.lowering_check import DEFAULT_MODULE, check_op, chip, ops_of
from tpu_kernels.lowering_check.examples import odd_tiles
from tpu_kernels.lowering_check.semantics import check_semantics
from tpu_kernels.lowering_check.vmem import traced_pallas_calls

F32 = jnp.float32


def _acc_kernel(x_ref, o_ref):
    @pl.when(pl.program_id(1) == 0)
    def _init():
        o_ref[...] = jnp.zeros_like(o_ref)

    o_ref[...] += x_ref[...]


def _row_sums(x, semantics, out_map=lambda i, j: (i, 0)):
    """Sums x's (8, 128) column blocks into one (8, 128) block per row block: axis 1 accumulates."""
    rows, cols = x.shape
    return pl.pallas_call(
        _acc_kernel,
        out_shape=jax.ShapeDtypeStruct((rows, 128), x.dtype),
        grid=(rows // 8, cols // 128),
        in_specs=[pl.BlockSpec((8, 128), lambda i, j: (i, j))],
        out_specs=pl.BlockSpec((8, 128), out_map),
        compiler_params=None if semantics is None else pltpu.CompilerParams(dimension_semantics=semantics),
    )(x)


def _findings(fn, *shape):
    [eqn] = traced_pallas_calls(fn, jax.ShapeDtypeStruct(shape, F32))
    return [(f.kind, f.axis) for f in check_semantics(eqn)], check_semantics(eqn)


def test_accumulation_axis_marked_parallel_is_an_error_whatever_the_grid_size():
    for shape in ((16, 256), (8, 128)):  # grid 2x2, and 1x1: the BlockSpecs decide, not the sizes
        kinds, [f] = _findings(functools.partial(_row_sums, semantics=("parallel", "parallel")), *shape)
        assert kinds == [("error", 1)]
        assert (
            "grid axis 1 is marked 'parallel', but the block of output 0 does not move along it" in f.message
        )
        assert "Mark the axis 'arbitrary'" in f.message


def test_sound_semantics_give_nothing_and_an_unmarked_independent_axis_is_a_hint():
    kinds, _ = _findings(functools.partial(_row_sums, semantics=("parallel", "arbitrary")), 16, 256)
    assert kinds == []
    kinds, [hint] = _findings(functools.partial(_row_sums, semantics=None), 16, 256)
    assert kinds == [("hint", 0)]  # axis 1 accumulates: sequential is right there
    assert (
        "has no dimension_semantics (so 'arbitrary')" in hint.message and "mark it 'parallel'" in hint.message
    )
    kinds, _ = _findings(functools.partial(_row_sums, semantics=("arbitrary", "arbitrary")), 16, 256)
    assert kinds == [("hint", 0)]


def test_an_index_map_computed_from_an_axis_counts_as_moving():
    # the output block moves along j: both axes may be parallel
    kinds, _ = _findings(
        functools.partial(_row_sums, semantics=("parallel", "parallel"), out_map=lambda i, j: (i, j)), 16, 128
    )
    assert kinds == []


def test_check_fails_a_parallel_accumulation_axis_without_running_anything(capsys):
    assert main(["check", "tests.lowering_check.demo_kernels", "--filter", "racy_matmul"]) == 1
    out = capsys.readouterr().out
    assert "error (semantics): kernel _kernel: grid axis 2 is marked 'parallel'" in out


def test_odd_tiles_make_even_sizes_odd_multiples_consistently():
    a, b = jax.ShapeDtypeStruct((512, 256), "bfloat16"), jax.ShapeDtypeStruct((256,), "bfloat16")
    [((a2, b2), kw)] = odd_tiles([((a, b), {"eps": 1e-6})])
    assert a2.shape == (768, 384) and b2.shape == (384,) and kw == {"eps": 1e-6}
    [((c,), _)] = odd_tiles([((jax.ShapeDtypeStruct((7, 8), "float32"),), {})])
    assert c.shape == (7, 8)  # odd, and small sizes, stay


# ---- VMEM against each chip's default scoped limit ---------------------------------------


def _copy_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def _copy(x, vmem_limit_bytes=None):
    block = pl.BlockSpec((1024, 2560), lambda i: (i, 0))  # 10 MiB f32: 20 MiB in and out, double-buffered
    return pl.pallas_call(
        _copy_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(x.shape[0] // 1024,),
        in_specs=[block],
        out_specs=block,
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel",), vmem_limit_bytes=vmem_limit_bytes
        ),
    )(x)


_EX = lambda: [((jax.ShapeDtypeStruct((2048, 2560), "float32"),), {})]  # noqa: E731


@tpu_kernel("check_limits::wide_copy", examples=_EX)
def wide_copy(x: torch.Tensor) -> torch.Tensor:
    return _copy(x)


@tpu_kernel("check_limits::wide_copy_with_limit", examples=_EX)
def wide_copy_with_limit(x: torch.Tensor) -> torch.Tensor:
    return _copy(x, vmem_limit_bytes=48 * 2**20)


def test_scoped_limits_per_generation():
    assert chip("v5e").scoped_vmem_bytes == 16 * 2**20 and chip("v6e").scoped_vmem_bytes == 32 * 2**20
    assert set(TARGET_CHIPS) <= set(SCOPED_VMEM_BYTES)


def test_above_the_default_scoped_limit_fails_with_the_limit_and_the_fix():
    report = check_op(wide_copy, chip_name="v5e")  # 40 MiB per step > 16 MiB
    [result] = report.examples
    assert report.status == "failed" and result.lowered
    [problem] = result.problems
    assert problem.kind == "vmem"
    assert (
        "needs about 40.0 MiB of VMEM per grid step (40.0 MiB of buffers), which misses the 16.0 MiB "
        "default scoped VMEM limit of a TPU v5e by 24.0 MiB"
    ) in problem.message
    assert "pltpu.CompilerParams(vmem_limit_bytes=...)" in problem.message
    assert check_op(wide_copy, chip_name="v6e").status == "failed"  # 40 > 32 MiB too


def test_vmem_limit_bytes_lifts_the_default_but_is_itself_a_limit():
    assert check_op(wide_copy_with_limit, chip_name="v6e").status == "ok"  # 40 <= 48 MiB, under 128 MiB
    report = check_op(wide_copy_with_limit, chip_name="v5p")  # 64 MiB a core: 48 MiB is allowed
    assert report.status == "ok", report


def test_shipped_defaults_fit_every_targeted_chip_and_declare_parallel_axes():
    """The shipped kernels' default blocks fit the smallest default scoped limit of the chips
    the check targets, at every example shape (softmax with 1024-row blocks needed 48 MiB
    backward); and (#14) each marks its independent grid axes "parallel" (no hint) and
    matmul's k axis "arbitrary" (no error)."""
    smallest = min(TARGET_CHIPS, key=SCOPED_VMEM_BYTES.__getitem__)
    assert smallest == "v5e"
    ops = ops_of([DEFAULT_MODULE])  # the shipped kernels (other tests register more ops)
    assert len(ops) >= 8
    for op in ops:
        report = check_op(op, chip_name=smallest)
        assert report.status == "ok", [p.message for e in report.examples for p in e.problems]
        for e in report.examples:
            assert not [w for w in e.warnings if "grid axis" in w], e.warnings


# ---- races at odd tile counts ---------------------------------------------------------------


def _mm_kernel(a_ref, b_ref, o_ref, acc_ref):
    @pl.when(pl.program_id(2) == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


@tpu_kernel(
    "check_limits::k_parallel_matmul",
    examples=lambda: [((jax.ShapeDtypeStruct((256, 256), "float32"),) * 2, {})],
)
def k_parallel_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """128-blocks with the k axis marked "parallel": at 256 (a 2x2x2 grid) the two simulated
    cores' halves line up and no race shows; at 384 (3x3x3) it does."""
    (m, k), n = a.shape, b.shape[1]
    return pl.pallas_call(
        _mm_kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), a.dtype),
        grid=(m // 128, n // 128, k // 128),
        in_specs=[
            pl.BlockSpec((128, 128), lambda i, j, kk: (i, kk)),
            pl.BlockSpec((128, 128), lambda i, j, kk: (kk, j)),
        ],
        out_specs=pl.BlockSpec((128, 128), lambda i, j, kk: (i, j)),
        scratch_shapes=[pltpu.VMEM((128, 128), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",) * 3),
    )(a, b)


def test_races_show_at_odd_tile_counts_that_the_examples_hide():
    report = check_op(k_parallel_matmul, races=True)
    [result] = report.examples
    kinds = [p.kind for p in result.problems]
    assert kinds == ["semantics", "race"], kinds  # the lint needs no run; the race needs odd tiles
    [race] = [p for p in result.problems if p.kind == "race"]
    assert race.message.startswith("in the TPU interpreter at f32[384,384], f32[384,384]: data race:")
    assert result.race_call == "f32[256,256], f32[256,256]; f32[384,384], f32[384,384]"
