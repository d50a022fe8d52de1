"""The shipped kernels' defaults sized to the chip's VMEM (issue 47): row blocks that shrink as
rows widen with the body's float32 temporaries counted, column-tiled softmax for rows too wide
for a whole-row block, matmul's large default blocks with Mosaic's scoped limit raised, and a
clear refusal of explicit blocks past what a shipped kernel may ask for.

The chip's verdicts behind these rules are in bench/reports/chip_v5e.json; here the rules
themselves are held, on the CPU (TPU lowering through jax.export, and the interpreter)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.experimental.pallas import tpu as pltpu

from tests.helpers import rand
from tpu_kernels.kernels import _blocks, _vmem, matmul, rmsnorm, softmax
from tpu_kernels.kernels.matmul import blocks as mm_blocks
from tpu_kernels.kernels.matmul import pallas as mm
from tpu_kernels.kernels.rmsnorm import pallas as rms
from tpu_kernels.kernels.scale_add import pallas as sa
from tpu_kernels.kernels.softmax import pallas as sm

WIDTHS = [1024, 2048, 4096, 5120, 8192, 14336, 16384]  # real models' hidden and FFN sizes
FOOTPRINTS = {
    "rmsnorm": rms.FORWARD,
    "rmsnorm_backward": rms.BACKWARD,
    "softmax": sm.FORWARD,
    "softmax_backward": sm.BACKWARD,
    "scale_add": sa.FOOTPRINT,
}


@settings(max_examples=60, deadline=None)
@given(
    kernel=st.sampled_from(sorted(FOOTPRINTS)),
    cols=st.one_of(st.sampled_from(WIDTHS), st.integers(1, 20000)),
    rows=st.integers(1, 20000),
    itemsize=st.sampled_from([2, 4]),
)
def test_default_row_block_fits_the_cap_and_stays_near_the_target(kernel, cols, rows, itemsize):
    """A default row block: a tile multiple (or all rows), within what a shipped kernel may raise
    the scoped VMEM limit to, no more than `block_bytes` of one input (or one tile), and the
    largest power of two that is: doubling it would pass the target or the cap. Where that
    power of two holds under `BLOCK_BYTES_MIN`, the next one up: never under the floor where
    the rows and the cap allow more."""
    fp = FOOTPRINTS[kernel]
    br = _blocks.auto_rows(rows, cols, itemsize, fp)
    assert br is not None  # every width up to 20000 has a whole-row default
    assert 1 <= br <= rows
    tile = _blocks.rows_tile(itemsize)
    assert _vmem.fits(fp.need(min(br, rows), cols, itemsize))
    if br < rows:
        assert br % tile == 0
        target, row = _blocks.block_bytes(rows, cols, itemsize), cols * itemsize
        block, floor = br * row, _blocks.BLOCK_BYTES_MIN
        if block > max(target, tile * row):  # the power of two under the target held under the floor
            assert (br // 2) * row < floor <= block < 2 * floor
        assert br == tile or 2 * block > target or not _vmem.fits(fp.need(2 * br, cols, itemsize))
        assert block >= floor or br == tile or not _vmem.fits(fp.need(2 * br, cols, itemsize))


def test_block_bytes_keep_64_steps_between_half_and_two_mib():
    assert _blocks.block_bytes(8192, 14336, 4) == 2 * 2**20  # 448 MiB: the largest blocks
    assert _blocks.block_bytes(1024, 16384, 4) == 2**20  # 64 MiB over 64 steps
    assert _blocks.block_bytes(16, 4096, 2) == 2**19  # a small input: never under 512 KiB


def test_rows_shrink_as_they_widen():
    blocks = [_blocks.auto_rows(16384, d, 2, rms.BACKWARD) for d in WIDTHS]
    assert blocks == sorted(blocks, reverse=True) and blocks[0] > blocks[-1]


def test_the_backward_counts_its_float32_temporaries():
    """rmsnorm's backward in bf16 at [8192, 4096] with 256-row blocks did not compile on a v5e
    under the 16 MiB default limit though its buffers came to 12 MiB: the five float32
    temporaries are what the buffers miss. The default's 128 rows (1 MiB of x) need more than
    the budget, so the kernel raises the limit past its estimate rather than shrink the block
    (64 rows ran at 76% of HBM peak on a v5e, 128 at 80%: bench/reports/chip_v5e_tune.json)."""
    from tpu_kernels.lowering_check.vmem import kernel_footprints

    assert rms.BACKWARD.need(256, 4096, 2) > 16 * 2**20
    br = _blocks.auto_rows(8192, 4096, 2, rms.BACKWARD)
    need = rms.BACKWARD.need(br, 4096, 2)
    assert br == 128 and need > _vmem.BUDGET
    x = jax.ShapeDtypeStruct((8192, 4096), jnp.bfloat16)
    w, r = jax.ShapeDtypeStruct((4096,), jnp.bfloat16), jax.ShapeDtypeStruct((8192, 1), jnp.float32)
    (kernel,) = kernel_footprints(rms.rmsnorm_backward, x, w, r, x)
    assert kernel.grid == (8192 // 128,)
    assert kernel.vmem_limit_bytes >= need * 5 // 4 + _vmem.HEADROOM  # the traced kernel asks for it


def test_an_explicit_block_past_the_cap_is_refused_with_the_fix():
    x = jax.ShapeDtypeStruct((8192, 16384), jnp.float32)
    w = jax.ShapeDtypeStruct((16384,), jnp.float32)
    with pytest.raises(ValueError, match=r"rmsnorm: block_rows=1024 needs about \d+ MiB of VMEM .* pass block_rows <= \d+"):
        jax.eval_shape(lambda x, w: rms.rmsnorm(x, w, block_rows=1024), x, w)


def test_an_explicit_block_that_needs_more_than_the_default_limit_raises_it():
    """A block whose need passes the budget compiles with a raised scoped VMEM limit (the
    corpus in bench/reports/chip_v5e.json holds the chip's verdicts)."""
    assert _vmem.limit_for(_vmem.BUDGET) is None
    limit = _vmem.limit_for(20 * 2**20)
    assert 20 * 2**20 < limit <= _vmem.CAP
    assert _vmem.limit_for(10**9) == _vmem.CAP and not _vmem.fits(10**9)


@pytest.mark.parametrize("shape", [(13, 131072), (8, 262144), (5, 200000)], ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_wide_rows_match_float64(shape, dtype):
    """Vocabulary rows: whole-row blocks walked in column chunks where the width has a chunk
    (131072, 262144), the column-tiled kernels where it has none (200000 is no multiple of 128)."""
    jdt = jnp.float32 if dtype == torch.float32 else jnp.bfloat16
    chunk = sm.chunk_for(shape[-1])
    assert (chunk is None) == (shape[-1] % 128 != 0)
    assert (sm.Config.default(shape, jdt).block_rows is None) == (chunk is None)  # None: the columns tiled
    x = rand(*shape, dtype=dtype) * 3
    out = softmax(x)
    ref = torch.softmax(x.double(), dim=-1)
    tol = 2e-6 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(out.double(), ref, atol=tol * ref.abs().max().item(), rtol=tol)
    dy = rand(*shape, dtype=dtype)
    y = ref.to(dtype)
    dx = softmax.backward_op(y, dy)
    ref_dx = y.double() * (dy.double() - (dy.double() * y.double()).sum(-1, keepdim=True))
    torch.testing.assert_close(dx.double(), ref_dx, atol=tol * ref_dx.abs().max().item() * 4, rtol=tol)


def _logits_and_grad(rng, rows: int, cols: int, dtype):
    """Softmax inputs: logits of scale 3 and an incoming gradient, fresh normals in `dtype`."""
    x = jnp.asarray(rng.standard_normal((rows, cols), np.float32) * 3, dtype)
    return x, jnp.asarray(rng.standard_normal((rows, cols), np.float32), dtype)


def _assert_softmax_matches_float64(x, y, dy, dx, tol: float) -> None:
    """y = softmax(x) and dx = its backward at (y, dy), normwise against float64."""
    x64, y64, dy64 = (np.asarray(a, np.float64) for a in (x, y, dy))
    e = np.exp(x64 - x64.max(-1, keepdims=True))
    ref = e / e.sum(-1, keepdims=True)
    ref_dx = y64 * (dy64 - (dy64 * y64).sum(-1, keepdims=True))
    assert np.linalg.norm(y64 - ref) <= tol * np.linalg.norm(ref)
    assert np.linalg.norm(np.asarray(dx, np.float64) - ref_dx) <= tol * np.linalg.norm(ref_dx) * 4


def _grids(fn, *specs) -> list[tuple]:
    from tpu_kernels.lowering_check.vmem import traced_pallas_calls

    return [tuple(eqn.params["grid_mapping"].grid) for eqn in traced_pallas_calls(fn, *specs)]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("shape", [(512, 131072), (256, 262144)], ids=str)
def test_vocabulary_rows_are_read_once(shape, dtype):
    """Every vocabulary row is read once and written once: a 1-D grid of whole-row blocks whose
    body walks the columns in chunks where a tile of rows fits the cap that way (on a v5e 76% of
    HBM peak at [512, 131072], where the column-tiled kernels ran at 64-70%:
    bench/reports/chip_v5e_rows_probe.json), else the staged kernel, grid (row tiles, 2 phases,
    column blocks), which reads each input block once (the two-pass kernels ran at 52-55%)."""
    x = jax.ShapeDtypeStruct(shape, dtype)
    chunk = sm.chunk_for(shape[-1])
    for fn, specs, fp in ((sm.softmax, (x,), sm.FORWARD), (sm.softmax_backward, (x, x), sm.BACKWARD)):
        (grid,) = _grids(fn, *specs)
        br = _blocks.auto_rows(*shape, x.dtype.itemsize, fp, chunk)
        if br is not None:
            assert grid == (shape[0] // br,) and _vmem.fits(fp.need(br, shape[1], x.dtype.itemsize, chunk))
            continue
        assert len(grid) == 3 and grid[1] == 2, grid
        assert _vmem.fits(sm._staged_need(*sm._wide_blocks(*shape, x.dtype.itemsize), grid[2],
                                          x.dtype.itemsize, fn is sm.softmax_backward))
    # the forward takes whole rows at both widths and dtypes; the backward, with a third
    # buffer, stages 262144 columns
    assert _blocks.auto_rows(*shape, x.dtype.itemsize, sm.FORWARD, chunk) is not None
    assert (_blocks.auto_rows(*shape, x.dtype.itemsize, sm.BACKWARD, chunk) is None) == (shape[1] == 262144)


@settings(max_examples=10, deadline=None)
@given(
    rows=st.integers(1, 24),
    lanes=st.integers(2, 12),
    chunk_lanes=st.sampled_from([1, 2, 3]),
    dtype=st.sampled_from(["float32", "bfloat16"]),
    seed=st.integers(0, 2**31 - 1),
)
def test_the_chunked_body_matches_float64_under_the_tpu_interpreter(rows, lanes, chunk_lanes, dtype, seed):
    """The whole-row kernels whose body walks the columns in chunks (several chunks, and one;
    rows past a block), forward and backward, under the TPU-semantics interpreter with VMEM
    poisoned with NaN until written: every output column is written, from the right statistics."""
    print(f"seed={seed}")
    cols = 128 * lanes * chunk_lanes
    rng = np.random.default_rng(seed)
    x, dy = _logits_and_grad(rng, rows, cols, dtype)
    chunk = 128 * chunk_lanes
    br = _blocks.rows_tile(x.dtype.itemsize)
    params = pltpu.InterpretParams(uninitialized_memory="nan", detect_races=True)
    with pltpu.force_tpu_interpret_mode(params):
        y = sm._rowwise(sm._fwd_kernel, [x], x.dtype, br, sm.FORWARD, "softmax", 5, 1, chunk)
        dx = sm._rowwise(sm._bwd_kernel, [y, dy], x.dtype, br, sm.BACKWARD, "softmax_backward", 4, 0, chunk)
    _assert_softmax_matches_float64(x, y, dy, dx, 2e-6 if dtype == "float32" else 1e-2)


@pytest.mark.parametrize("path", ["chunked", "staged", "two_pass"])
@pytest.mark.parametrize("masked", [300, 640, 1023])
def test_rows_whose_leading_columns_are_masked_match_float64(path, masked):
    """A row whose first `masked` logits are -inf (a padding or causal mask) over a whole first
    chunk or column block and more: the online max is -inf until a later chunk, and the sum must
    not become NaN (exp(-inf - -inf)); a row masked whole is NaN, as torch's softmax of it."""
    rng = np.random.default_rng(masked)
    x = rng.standard_normal((8, 1024), np.float32) * 3
    x[:, :masked] = -np.inf
    x[3] = -np.inf  # a row masked whole
    xj = jnp.asarray(x)
    with pltpu.force_tpu_interpret_mode(pltpu.InterpretParams(uninitialized_memory="nan")):
        if path == "chunked":
            y = sm._rowwise(sm._fwd_kernel, [xj], xj.dtype, 8, sm.FORWARD, "softmax", 5, 1, 128)
        else:
            y = getattr(sm, f"_{path}")([xj], xj.dtype, False, 8, 128)
    y = np.asarray(y, np.float64)
    ref = torch.softmax(torch.from_numpy(x).double(), dim=-1).numpy()
    assert np.isnan(y[3]).all() and np.isnan(ref[3]).all()
    keep = np.arange(8) != 3
    np.testing.assert_allclose(y[keep], ref[keep], rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("cols, want", [(8192, None), (8320, 8192), (14336, 7168), (131072, 8192),
                                        (16896, 5632), (128256, 8192), (200000, None), (1000, None)])
def test_chunk_for_divides_the_row_in_lane_multiples_or_leaves_a_tail(cols, want):
    """8320 columns (128 x 65) divide into 1664-column chunks at best: narrower than
    MIN_DIVIDING_CHUNK, so 8192 and a 128-column tail."""
    chunk = sm.chunk_for(cols)
    assert chunk == want
    if want is not None and cols % chunk == 0:
        assert chunk == max(c for c in range(128, sm.CHUNK + 1, 128) if cols % c == 0)


def test_rows_too_wide_to_stage_take_two_passes():
    x = jax.ShapeDtypeStruct((8, 2**22), "float32")  # 128 MiB a tile of rows
    assert [len(g) for g in _grids(sm.softmax, x)] == [2, 2]
    assert [len(g) for g in _grids(sm.softmax_backward, x, x)] == [2, 2]


@settings(max_examples=8, deadline=None)
@given(
    rows=st.integers(1, 20),
    cols=st.integers(129, 6000),
    block_cols=st.sampled_from([128, 256, 1024]),
    dtype=st.sampled_from(["float32", "bfloat16"]),
    staged=st.booleans(),
)
def test_both_column_tiled_paths_match_float64(rows, cols, block_cols, dtype, staged):
    """The staged and the two-pass kernels at small widths with several (and partial) column
    blocks, forward and backward, against float64."""
    rng = np.random.default_rng(rows * 7919 + cols)
    x, dy = _logits_and_grad(rng, rows, cols, dtype)
    br = min(rows, _blocks.rows_tile(x.dtype.itemsize))
    path = sm._staged if staged else sm._two_pass
    with pltpu.force_tpu_interpret_mode(True):
        y = path([x], x.dtype, False, br, block_cols)
        dx = path([y, dy], x.dtype, True, br, block_cols)
    _assert_softmax_matches_float64(x, y, dy, dx, 2e-6 if dtype == "float32" else 2e-2)


def test_wide_softmax_lowers_for_tpu():
    from tests.kernels.checks import lowers_for_tpu

    x = jax.ShapeDtypeStruct((256, 262144), "float32")
    lowers_for_tpu(softmax, x)
    lowers_for_tpu(softmax.backward_op, x, x)


@pytest.mark.parametrize("itemsize, passes", [(2, 1), (4, 1), (4, 3)])
def test_matmul_defaults_fill_the_mxu_and_fit_the_cap(itemsize, passes):
    """At a large shape the default blocks are MXU-filling (1024-class in M and N), fit the cap,
    and need more than the chip's default limit, so the kernel raises it."""
    bm, bn, bk = mm_blocks.default(8192, 8192, 8192, itemsize, passes)
    assert max(bm, bn) >= 1024 and min(bm, bn) >= 512 and bk >= 256
    need = mm_blocks.vmem_need(bm, bn, bk, itemsize, passes)
    assert _vmem.fits(need)
    assert need > _vmem.BUDGET  # so the limit is raised


@pytest.mark.parametrize("precision, want", [(None, 1), ("default", 1), ("bfloat16", 1), ("high", 3),
                                             ("tensorfloat32", 3), ("highest", 3), ("float32", 3)])
def test_matmul_counts_the_passes_of_the_precision_in_effect(precision, want):
    assert mm.mxu_passes(jnp.float32, precision) == want
    assert mm.mxu_passes(jnp.bfloat16, precision) == 1
    with jax.default_matmul_precision(precision or "default"):
        assert mm.mxu_passes(jnp.float32) == (want if precision else 1)


def test_a_multi_pass_product_counts_its_split_blocks_and_per_pass_results():
    one, three = mm_blocks.vmem_need(1024, 1024, 256, 4, 1), mm_blocks.vmem_need(1024, 1024, 256, 4, 3)
    ab = 2 * 1024 * 256
    assert three - one == 2 * 1024 * 1024 * 4 + ab * 8
    # a float32 result accumulates in its output block: no scratch beside it
    assert mm_blocks.vmem_need(1024, 1024, 256, 2, 1) - mm_blocks.vmem_need(1024, 1024, 256, 4, 1) == (
        1024 * 1024 * 4 - 2 * (ab + 1024 * 1024) * 2)


def test_matmul_refuses_blocks_past_the_cap():
    a = jax.ShapeDtypeStruct((4096, 4096), jnp.float32)
    with pytest.raises(ValueError, match=r"matmul: blocks \(2048, 2048, 2048\) .* need about \d+ MiB"):
        jax.eval_shape(lambda a, b: mm.matmul(a, b, block_m=2048, block_n=2048, block_k=2048), a, a)


def test_matmul_defaults_are_right_at_ragged_shapes():
    a, b = rand(1100, 300), rand(300, 1030)
    torch.testing.assert_close(matmul(a, b).double(), a.double() @ b.double(), atol=1e-4, rtol=1e-5)


def test_default_rmsnorm_matches_float64_at_a_wide_row():
    x, w = rand(40, 16384), rand(16384)
    y = rmsnorm(x, w)
    ref = x.double() * torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()
    np.testing.assert_allclose(y.double().numpy(), ref.numpy(), rtol=1e-5, atol=1e-5)


def test_rows_too_wide_for_the_budget_still_run_by_default():
    """rmsnorm has no column-tiled path: rows past the budget even one tile at a time take one
    tile with the limit raised to the cap, and are right (a CPU ran them before the budget
    existed; refusing them would turn a right answer into an error)."""
    x, w = rand(13, 131072), rand(131072)
    assert _blocks.auto_rows(13, 131072, 4, rms.FORWARD) is None
    y = rmsnorm(x, w)
    ref = x.double() * torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()
    np.testing.assert_allclose(y.double().numpy(), ref.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_the_staged_softmax_is_right_under_the_tpu_interpreter(backward):
    """The staged kernels under the TPU-semantics interpreter (block pipelining, VMEM scratch
    poisoned with NaN until written, races detected): phase 1 reads only the copy phase 0 wrote,
    and the output blocks written back hold phase 1's values."""
    rng = np.random.default_rng(11)
    x = jnp.asarray(rng.standard_normal((16, 640), np.float32) * 3)
    dy = jnp.asarray(rng.standard_normal((16, 640), np.float32))
    params = pltpu.InterpretParams(uninitialized_memory="nan", detect_races=True)
    with pltpu.force_tpu_interpret_mode(params):
        y = sm._staged([x], x.dtype, False, 8, 128)
        out = sm._staged([y, dy], x.dtype, True, 8, 128) if backward else y
    x64, y64, dy64 = (np.asarray(a, np.float64) for a in (x, y, dy))
    e = np.exp(x64 - x64.max(-1, keepdims=True))
    ref = e / e.sum(-1, keepdims=True)
    if backward:
        ref = y64 * (dy64 - (dy64 * y64).sum(-1, keepdims=True))
    assert np.isfinite(np.asarray(out)).all()
    assert np.linalg.norm(np.asarray(out, np.float64) - ref) <= 2e-6 * np.linalg.norm(ref)
