"""Packed-dtype tiles (Mosaic's rule, tpu_kernels/lowering_check/tiling.py) and block indices that
scalar-prefetch index maps compute outside their arrays (tpu_kernels/verification/bounds.py, --bounds,
checked mode's TPU_KERNELS_CHECK_BOUNDS)."""

from __future__ import annotations

import jax
import numpy as np
import pytest
import torch
from jax.experimental import pallas as pl

import tpu_kernels
from tests.lowering_check import demo_kernels as demo
from tpu_kernels.cli import main
from tpu_kernels.lowering.export import lowering_for_tpu
from tpu_kernels.lowering.target import chip
from tpu_kernels.lowering_check import check_op, tiling
from tpu_kernels.lowering_check.examples import random_arrays, scale_down
from tpu_kernels.verification import bounds, checked_mode

DEMO = "tests.lowering_check.demo_kernels"

# ---- packed dtypes -------------------------------------------------------------------------------


def _lowers(shape: tuple[int, ...], block: tuple[int, ...], dtype: str) -> bool:
    """Does Pallas' TPU lowering accept this block (jax.export for "tpu", on this machine)?"""

    def copy(x_ref, o_ref):
        o_ref[...] = x_ref[...]

    spec = pl.BlockSpec(block, lambda *i: i)
    grid = tuple(pl.cdiv(s, b) for s, b in zip(shape, block))
    f = pl.pallas_call(
        copy, out_shape=jax.ShapeDtypeStruct(shape, dtype), grid=grid, in_specs=[spec], out_specs=spec
    )
    try:
        with lowering_for_tpu(chip("v6e")):
            jax.export.export(jax.jit(f), platforms=["tpu"])(jax.ShapeDtypeStruct(shape, dtype))
    except ValueError as e:
        assert "Pallas TPU lowering currently requires" in str(e)
        return False
    return True


def test_the_lowering_asks_8_rows_of_every_dtype_and_packing_only_of_1d_blocks():
    """What `tiling` says Pallas' own rule is (lowering.py `_check_block_mappings`), checked
    against the lowering: 2-D blocks need multiples of (8, 128) whatever the dtype; 1-D blocks
    a power of two of at least 128 * packing (or 1024 elements, or the whole array)."""
    for dtype in ("float32", "bfloat16", "int8", "float8_e4m3fn"):
        assert _lowers((64, 256), (8, 128), dtype), dtype
        assert not _lowers((64, 256), (4, 128), dtype), dtype
    assert _lowers((8192,), (128,), "float32") and not _lowers((8192,), (128,), "bfloat16")
    assert _lowers((8192,), (256,), "bfloat16") and not _lowers((8192,), (256,), "int8")
    assert _lowers((8192,), (512,), "int8")


@pytest.mark.parametrize(
    "rows, dtype, tile, padded",
    [
        (8, "int8", 8, 8),  # lowered, but off int8's native 32-row tile
        (32, "int8", 32, 32),
        (64, "int8", 32, 64),
        (40, "int8", 8, 40),  # the large tile only when the rows divide by it
        (8, "bfloat16", 8, 8),
        (16, "bfloat16", 16, 16),
        (12, "float32", 8, 16),
        (5, "int8", 8, 8),  # fewer than 8 rows: a power of two from the packing up
        (3, "int8", 4, 4),
        (3, "float32", 4, 4),
        (1, "bfloat16", 2, 2),
        (1, "float32", 1, 1),
    ],
)
def test_tile_rows_follow_mosaics_getTilingFactor(rows, dtype, tile, padded):
    assert tiling.tile_rows(rows, dtype) == tile
    assert tiling.padded_shape((rows, 100), dtype) == (padded, 128)
    # XLA's large-tile flags change the tile chosen, never the padding
    small = tiling.tile_rows(rows, dtype, large=False)
    assert -(-rows // small) * small == padded


def test_1d_blocks_pad_to_their_compact_tile():
    assert tiling.padded_shape((384,), "float32") == (512,)  # 3 rows of 128 -> a 4-row tile
    assert tiling.padded_shape((2048,), "float32") == (2048,)
    assert tiling.padded_shape((1500,), "int8") == (2048,)  # 8-row (1024-element) tiles


def test_native_tiles_by_packing():
    assert [tiling.native_rows(d) for d in ("float32", "bfloat16", "float16", "int8", "float8_e5m2")] == [
        8,
        16,
        16,
        32,
        32,
    ]


def test_only_packed_blocks_that_could_use_the_native_tile_are_flagged():
    assert tiling.off_native_tile((8, 128), (64, 128), "int8") == 8
    assert tiling.off_native_tile((8, 128), (64, 128), "bfloat16") == 8
    assert tiling.off_native_tile((32, 128), (64, 128), "int8") is None
    assert tiling.off_native_tile((8, 128), (64, 128), "float32") is None
    assert tiling.off_native_tile((8, 128), (8, 128), "int8") is None  # the whole dimension
    assert tiling.off_native_tile((512,), (4096,), "int8") is None  # 1-D tiles are compact


def test_int8_and_bf16_blocks_of_8_rows_lower_with_a_performance_warning():
    report = check_op(demo.int8_rows_of_8)
    [result] = report.examples
    assert report.status == "ok" and result.lowered  # Mosaic accepts it: a warning, not an error
    [warning] = result.warnings
    assert warning.startswith(
        "kernel _copy: block (8, 128) of input 0 and output 0 (int8[64, 128]) has 8 rows, not a multiple of "
        "32: the TPU packs 4 int8 values into each 32-bit sublane, so int8's native tile is (32, 128)"
    )
    assert "laid out in (8, 128) tiles" in warning and "e.g. (32, 128)" in warning
    # no padding: 8 rows of int8 fill (8, 128) tiles exactly (it was estimated as 32 rows)
    [k] = result.kernels
    assert [b.bytes for b in k.buffers] == [2 * 8 * 128, 2 * 8 * 128]

    [bf16] = check_op(demo.bf16_rows_of_8).examples
    [warning] = bf16.warnings
    assert "has 8 rows, not a multiple of 16" in warning and "native tile is (16, 128)" in warning

    [clean] = check_op(demo.int8_rows_of_32).examples
    assert clean.ok and clean.warnings == []


# ---- out-of-bounds block indices ----------------------------------------------------------------

TABLE = torch.arange(8 * 8 * 128, dtype=torch.float32).reshape(8, 8, 128)


def _slab(out: torch.Tensor, i: int) -> int:
    return int(out[i, 0, 0]) // (8 * 128)


def test_the_default_interpreter_reads_another_block_silently():
    """What docs/troubleshooting.md says the default interpreter does with such an index."""
    out = demo.gather(torch.tensor([8, 1000, -1, -2, -8, -9], dtype=torch.int32), TABLE)
    assert [_slab(out, i) for i in range(6)] == [7, 7, 7, 6, 0, 0]


def test_the_tpu_interpreters_own_error_is_explained_in_one_line():
    call = ((np.array([0, 3, 8], np.int32), jax.numpy.asarray(TABLE.numpy().copy())), {})
    with pytest.raises(jax.errors.JaxRuntimeError) as info:
        bounds.run_call(demo.gather, call, bounds.BOUNDS_PARAMS)
    text = str(info.value)
    assert text.startswith("INTERNAL: CpuCallback error") and len(text) > 1000  # the message seen
    assert "Out-of-bounds block index (8, 0, 0)" in bounds.interpreter_line(text)
    assert bounds.explain_interpreter_error(text, {"t_ref": "input 0"}).startswith(
        "index map of input 0 reads block (8, 0, 0) outside [0, 8) along dimension 0 at grid point (2,)"
    )


def test_bounds_fails_an_index_map_that_reads_past_the_end(capsys):
    assert main(["check", DEMO, "--filter", "gather_next$", "--bounds"]) == 1
    out = capsys.readouterr().out
    assert (
        "error (out-of-bounds): index map of input 0 reads block (8, 0, 0) outside [0, 8) along dimension 0"
        in out
    )
    assert "the default CPU interpreter silently reads block 7 instead" in out
    # without --bounds the data-dependent index map is not checked (static coverage leaves it out)
    assert main(["check", DEMO, "--filter", "gather_next$"]) == 0


def test_kernels_inside_checkpoint_are_reached():
    [result] = check_op(demo.gather_next_remat, bounds=True).examples
    [problem] = result.problems
    assert problem.message.startswith("index map of input 0 reads block (8, 0, 0) outside [0, 8)")
    assert problem.raw == ""  # found by evaluating the index map, before the TPU interpreter ran


def test_negative_block_indices_are_found_too():
    # the TPU interpreter slices with NumPy and lets -1 on a squeezed dimension through
    [result] = check_op(demo.gather_previous, bounds=True).examples
    [problem] = result.problems
    assert problem.kind == "out-of-bounds"
    assert problem.message.startswith("index map of input 0 reads block (-1, 0, 0) outside [0, 8)")


def test_the_kernel_bodys_own_copies_are_checked_in_the_tpu_interpreter():
    [result] = check_op(demo.gather_dma, bounds=True).examples
    [problem] = result.problems
    assert problem.message.startswith(
        "the kernel body reads [8:9, 0:8, 0:128] of the HBM buffer of shape (8, 8, 128)"
    )
    assert problem.raw.startswith("Out-of-bounds read of")


def test_in_range_indices_pass_and_shape_only_indices_are_named():
    report = check_op(demo.gather, bounds=True)
    [result] = report.examples
    assert report.status == "ok" and result.bounds_call == "int32[3], f32[8,8,128]" and not result.warnings
    [result] = check_op(demo.gather_shape_only, bounds=True).examples
    assert result.ok and result.warnings[0].startswith("bounds checked with zeros for idx")


def test_kernels_without_scalar_prefetch_are_left_to_the_static_pass():
    [result] = check_op(demo.int8_rows_of_32, bounds=True).examples
    assert result.ok and result.bounds_call is None


def test_calls_with_index_values_keep_their_shapes():
    call = ((np.array([0, 3, 7], np.int32), jax.ShapeDtypeStruct((8, 8, 1024), "float32")), {})
    assert scale_down([call]) == [call]
    (idx, table), _ = random_arrays(call)
    assert idx.tolist() == [0, 3, 7] and table.shape == (8, 8, 1024)


def test_checked_mode_checks_bounds_when_asked(monkeypatch):
    idx = torch.tensor([0, 3, 8], dtype=torch.int32)
    with tpu_kernels.checked():
        demo.gather(idx, TABLE)  # not asked: silently the last slab
        monkeypatch.setattr(checked_mode, "BOUNDS", True)
        assert demo.gather(torch.tensor([0, 3, 7], dtype=torch.int32), TABLE).shape == (3, 8, 128)
        with pytest.raises(checked_mode.CheckFailure) as info:
            demo.gather(idx, TABLE)
    first = str(info.value).splitlines()[0]
    assert first.startswith(
        "checked mode: check_demo::gather: index map of input 0 reads block (8, 0, 0) outside [0, 8)"
    )
    assert idx.tolist() == [0, 3, 8]  # the caller's tensor is untouched


def test_a_bounds_run_that_fails_otherwise_warns_and_checks_nothing(monkeypatch):
    def fails(op, call):
        raise RuntimeError("the interpreter cannot run this\nmore")

    monkeypatch.setattr(bounds, "call_problem", fails)
    monkeypatch.setattr(checked_mode, "BOUNDS", True)
    with (
        tpu_kernels.checked(),
        pytest.warns(UserWarning, match="check_demo::gather: block indices not checked"),
    ):
        out = demo.gather(torch.tensor([0, 3, 7], dtype=torch.int32), TABLE)
    assert [_slab(out, i) for i in range(3)] == [0, 3, 7]
