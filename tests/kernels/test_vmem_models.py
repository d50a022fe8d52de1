"""The shipped row kernels' two VMEM models held to each other, to their bodies and to the chip
(issue 59).

Each row kernel sizes its blocks and raises Mosaic's scoped VMEM limit from its own model,
`_blocks.RowFootprint.need`: its row blocks, (rows, 1) float32 columns and weight row, pipelined,
and the float32 temporaries of its body. `tpu-kernels check` estimates the same call from its
traced jaxpr (`lowering_check/vmem.py`: each buffer tile by tile; `lowering_check/temporaries.py`: the body's
values held across a reduction). The two were written apart; here, over shapes, dtypes and
blocks, the kernel's model is held part by part to the check's, its raised limit to both, its
temporaries to a count derived from its traced body, and its need to the scoped allocation a v5e
reported where it refused the kernel's body (bench/reports/chip_corpus_v5e.json).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass

import jax
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tpu_kernels.kernels import _blocks, _vmem
from tpu_kernels.kernels._blocks import RowFootprint
from tpu_kernels.kernels.rmsnorm import pallas as rms
from tpu_kernels.kernels.scale_add import pallas as sa
from tpu_kernels.kernels.softmax import pallas as sm
from tpu_kernels.lowering.target import chip
from tpu_kernels.lowering_check import corpus_verdicts, temporaries, vmem

MIB = 2**20
S = jax.ShapeDtypeStruct


@dataclass(frozen=True)
class RowKernel:
    """A shipped row kernel: its footprint, how to trace it, and what each of its buffers is."""

    footprint: RowFootprint
    call: Callable[[int, int, str, int | None], tuple[Callable, tuple]]  # rows, cols, dtype, block_rows
    roles: tuple[str, ...]  # inputs then outputs: "row" block, (rows, 1) "column", "weight" row
    chunked: bool = False  # the body walks rows past softmax's CHUNK columns in chunks

    def chunk(self, cols: int) -> int | None:
        return sm.chunk_for(cols) if self.chunked else None


def _rms(rows, cols, dtype, br):
    return functools.partial(rms.rmsnorm, block_rows=br), (S((rows, cols), dtype), S((cols,), dtype))


def _rms_bwd(rows, cols, dtype, br):
    x, w = S((rows, cols), dtype), S((cols,), dtype)
    return functools.partial(rms.rmsnorm_backward, block_rows=br), (x, w, S((rows, 1), "float32"), x)


def _rows(fn, arrays: int):
    return lambda rows, cols, dtype, br: (
        functools.partial(fn, block_rows=br),
        (S((rows, cols), dtype),) * arrays,
    )


KERNELS = {
    "rmsnorm": RowKernel(rms.FORWARD, _rms, ("row", "weight", "row", "column")),
    "rmsnorm_backward": RowKernel(
        rms.BACKWARD, _rms_bwd, ("row", "weight", "column", "row", "row", "weight")
    ),
    "softmax": RowKernel(sm.FORWARD, _rows(sm.softmax, 1), ("row", "row"), chunked=True),
    "softmax_backward": RowKernel(sm.BACKWARD, _rows(sm.softmax_backward, 2), ("row",) * 3, chunked=True),
    "scale_add": RowKernel(sa.FOOTPRINT, _rows(sa.scale_add, 2), ("row",) * 3),
    "scale_add_backward": RowKernel(
        sa.SCALED,
        lambda rows, cols, dtype, br: (lambda g: sa._scaled(g, 0.5, br), (S((rows, cols), dtype),)),
        ("row",) * 2,
    ),
}
PARTS = ("row", "column", "weight", "temporaries")


def model_parts(
    fp: RowFootprint, block_rows: int, cols: int, itemsize: int, chunk: int | None
) -> dict[str, int]:
    """The kernel's own need, `fp.need`, split into its parts (each alone in a footprint)."""

    def alone(**part) -> int:
        bare = dataclasses.replace(
            fp, **{"blocks": 0, "temporaries": 0, "columns": 0, "weight": False, **part}
        )
        return bare.need(block_rows, cols, itemsize, chunk)

    parts = {
        "row": alone(blocks=fp.blocks),
        "column": alone(columns=fp.columns),
        "weight": alone(weight=fp.weight),
        "temporaries": alone(temporaries=fp.temporaries),
    }
    assert sum(parts.values()) == fp.need(block_rows, cols, itemsize, chunk)
    return parts


def check_parts(k: vmem.KernelFootprint, roles: tuple[str, ...]) -> dict[str, int]:
    """The check's estimate of one call, split the same way."""
    assert len(k.buffers) == len(roles), [b.what for b in k.buffers]
    parts = dict.fromkeys(PARTS, 0)
    for b, role in zip(k.buffers, roles):
        parts[role] += b.bytes
    parts["temporaries"] = k.temporaries
    return parts


# On a grid of several steps the kernel's need is at most this many times the check's estimate where
# it raises the limit (measured: up to 2.2x, rmsnorm at float32 [10305, 131072], 8-row blocks); on
# a one-step grid, which Mosaic single-buffers and the kernel counts double-buffered, up to 4x
# (measured 3.5x: rmsnorm at float32 [283, 4096], whose body the check finds holds nothing).
OVER_ASK = 2.5
OVER_ASK_ONE_STEP = 4.0
WIDTHS = [1024, 2048, 4096, 5120, 8192, 14336, 16384, 32768, 131072]


@settings(max_examples=80, deadline=None)
@given(
    name=st.sampled_from(sorted(KERNELS)),
    rows=st.one_of(st.integers(1, 16384), st.sampled_from([8192, 4096, 16])),
    cols=st.one_of(st.integers(1, 20000), st.sampled_from(WIDTHS)),
    dtype=st.sampled_from(["bfloat16", "float32"]),
    block_rows=st.one_of(st.none(), st.sampled_from(_blocks.ROW_BLOCKS["block_rows"]), st.integers(1, 2048)),
)
# the issue's: a (128, 1) float32 inv_rms is 2 x 64 KiB as Mosaic lays it out (128 lanes), not 2 x 512 B
@example(name="rmsnorm", rows=8192, cols=4096, dtype="bfloat16", block_rows=None)
@example(name="rmsnorm_backward", rows=8192, cols=4096, dtype="bfloat16", block_rows=None)
@example(name="scale_add", rows=9, cols=131072, dtype="bfloat16", block_rows=1)  # blocks under a tile
def test_the_kernels_need_its_limit_and_the_checks_estimate_agree(name, rows, cols, dtype, block_rows):
    """Part by part, the kernel's model never counts less than the check (the row blocks and the
    (rows, 1) columns of a grid of several steps to the byte: both lay out the same tiles); it
    raises the limit its need asks for, under which the check passes the call on a v5e; and it
    asks at most OVER_ASK times the check's estimate. A block it refuses is one its model says
    does not fit."""
    kernel = KERNELS[name]
    fp, chunk = kernel.footprint, kernel.chunk(cols)
    itemsize = jax.numpy.dtype(dtype).itemsize
    fn, specs = kernel.call(rows, cols, dtype, block_rows)
    try:
        (k,) = vmem.kernel_footprints(fn, *specs)
    except ValueError as e:  # an explicit block past the cap
        assert block_rows is not None and "block_rows" in str(e)
        assert not _vmem.fits(fp.need(_blocks.row_block(rows, block_rows), cols, itemsize, chunk))
        return
    assert len(k.grid) == 1  # the drawn widths keep whole-row blocks (no column-tiled softmax)
    br = k.buffers[0].shape[0]
    need = fp.need(br, cols, itemsize, chunk)
    ours, theirs = model_parts(fp, br, cols, itemsize, chunk), check_parts(k, kernel.roles)
    for part in PARTS:
        assert theirs[part] <= ours[part], (part, ours, theirs)
    several_steps = k.grid[0] > 1
    if several_steps:
        assert ours["column"] == theirs["column"], (ours, theirs)
        if br % _blocks.rows_tile(itemsize) == 0:
            assert ours["row"] == theirs["row"], (ours, theirs)
    assert k.vmem_limit_bytes == _vmem.limit_for(need)
    if _vmem.fits(need):
        verdict = vmem.verdict(k, chip("v5e"))
        assert verdict.fits, verdict.describe()
    # A block of fewer rows than a sublane tile (rows=1, cols=131072 in bf16: 18x on a one-step
    # grid; 9 steps of block_rows=1 at bf16 [9, 131072]: 2.7x) is sized by the model as a whole
    # tile of rows with its temporaries, the check by fewer: no margin is claimed there (both
    # found by this property; the over-ask is VMEM asked, not a wrong result).
    if need > _vmem.BUDGET and br >= _blocks.rows_tile(itemsize):
        assert need <= (OVER_ASK if several_steps else OVER_ASK_ONE_STEP) * k.estimate, (need, k.estimate)


def live_float32_blocks(eqn, width: int) -> int:
    """The most float32 values of a block's shape (rows by `width`: the row, or the chunk a chunked
    body walks) that the traced body holds live at once, an operation's operands with its result,
    block reads aside (their block stays in VMEM). A body without a reduction is an elementwise
    chain that streams through registers: none (the check's `temporaries.held` counts none there,
    and the v5e's allocation for scale_add's body was its buffers' to 0.03%)."""
    body = temporaries.body_values(eqn)
    if not body.barriers:
        return 0
    rows = vmem.memref_shape(eqn.params["grid_mapping"].block_mappings[0])[0]
    blocks = [
        v for v in body.values if v.primitive != "get" and v.dtype == "float32" and v.shape == (rows, width)
    ]
    return max((sum(v.start <= at <= v.end for v in blocks) for at in {v.start for v in blocks}), default=0)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("cols", [1024, 16384], ids=["whole-rows", "chunked"])
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_each_footprint_counts_the_float32_temporaries_its_body_keeps_live(name, cols, dtype):
    """`RowFootprint.temporaries` is at least the float32 blocks the kernel's own body keeps live
    at once. rmsnorm's backward, in bf16, holds five where dx's difference is formed (dy's upcast,
    xhat, g, xhat times the row mean, and g minus that): counting three, it asked for a 20 MiB
    limit at bf16 [8192, 4096] by default, where five ask for 25."""
    kernel = KERNELS[name]
    fn, specs = kernel.call(256, cols, dtype, 16)
    (eqn,) = vmem.traced_pallas_calls(fn, *specs)
    live = live_float32_blocks(eqn, kernel.chunk(cols) or cols)
    assert live <= kernel.footprint.temporaries, (name, live)
    if name == "rmsnorm_backward" and dtype == "bfloat16":
        assert live == kernel.footprint.temporaries == 5


# ---- the chip's verdicts -------------------------------------------------------------------

BODIES = {
    "rmsnorm": "rmsnorm",
    "rmsnorm_bwd": "rmsnorm_backward",
    "softmax": "softmax",
    "softmax_bwd": "softmax_backward",
    "scale_add": "scale_add",
    "scale_add_bwd": "scale_add_backward",
}
BODY_ID = re.compile(r"^body_(\w+)/(bf16|f32)\[(\d+),(\d+)\]/block_rows=(\d+)$")
# the compiler's scoped allocation in a refusal; past the core's VMEM, the program's requirement
ALLOCATED = re.compile(r"Scoped allocation with size ([\d.]+)M|Program vmem requirement ([\d.]+)M")


def chip_refusals() -> list[tuple[str, str, int, int, int, int]]:
    """(kernel, dtype, rows, cols, block_rows, bytes the chip allocated) of every shipped row
    kernel's body the v5e refused under its 16 MiB default limit, from the committed record."""
    found = []
    for call in corpus_verdicts.load(corpus_verdicts.record_path("v5e"))["calls"]:
        m, allocated = BODY_ID.match(call["id"]), ALLOCATED.search(call.get("error") or "")
        if m and not call["compiles"] and allocated:
            dtype = {"bf16": "bfloat16", "f32": "float32"}[m[2]]
            size = float(allocated[1] or allocated[2]) * MIB
            found.append((BODIES[m[1]], dtype, int(m[3]), int(m[4]), int(m[5]), int(size)))
    return found


def test_the_kernels_own_need_covers_what_the_chip_allocated_where_it_refused_the_body():
    """Where the v5e refused a shipped kernel's body at a block under the default limit, its
    refusal names the VMEM the body took: the kernel's own model at that block needs at least
    that, and the shipped kernel given that block raises its limit past it, or refuses the block.
    (The check's estimate is held to every verdict of the record in tests/lowering_check/test_chip_corpus.py.)
    rmsnorm's backward with three float32 temporaries counted instead of five falls short at 15 of
    its 46 refusals (bf16 [8192, 4096] with 208-row blocks: 19.95 MiB counted, 21.27 allocated)."""
    refusals = chip_refusals()
    assert len(refusals) >= 170 and {r[0] for r in refusals} == set(KERNELS)
    short = []
    for name, dtype, rows, cols, block_rows, allocated in refusals:
        kernel = KERNELS[name]
        need = kernel.footprint.need(min(block_rows, rows), cols, jax.numpy.dtype(dtype).itemsize)
        if need < allocated:
            short.append(
                f"{name} {dtype}[{rows},{cols}] block_rows={block_rows}: "
                f"{need / MIB:.2f} MiB counted, {allocated / MIB:.2f} allocated"
            )
            continue
        if kernel.chunk(cols):  # the shipped softmax walks such rows in chunks: another body than the chip's
            continue
        fn, specs = kernel.call(rows, cols, dtype, block_rows)
        if not _vmem.fits(need):
            with pytest.raises(ValueError, match="block_rows"):
                vmem.kernel_footprints(fn, *specs)
            continue
        (k,) = vmem.kernel_footprints(fn, *specs)
        assert k.vmem_limit_bytes >= allocated, (name, dtype, rows, cols, block_rows)
    assert not short, short
