"""The calibration corpus of the TPU VMEM check: kernel calls whose compile verdict the chip gives.

Each `Call` is one Pallas kernel call at fixed shapes and blocks: the shipped kernels
(matmul, rmsnorm forward and backward, softmax forward and backward, scale_add forward and
backward), the four
Pallas templates (elementwise, row_reduction, matmul, flash_attention; forward and backward)
and small kernels written for the corpus (`synthetic.py`: one-step grids, VMEM scratch,
scalar prefetch, vmem_limit_bytes, float32 temporaries). Shapes are model shapes (row
widths 1024-16384, vocabulary widths 32768-262144, matmuls up to the FFN's 8192x4096x14336,
attention sequences 1k-8k); blocks run from small to oversize, and many calls sit near the
16 MiB default scoped VMEM limit of a v5e on both sides, where the check must be right.
Every tunable is passed explicitly, so a change of a kernel's defaults leaves the corpus as
it is.

On a TPU host, `compile_verdict(call)` compiles one call and reports whether the chip
accepts it (the runner writes bench/reports/chip_corpus_v5e.json from it); on a CPU,
tests/lowering_check/test_chip_corpus.py holds the VMEM check's prediction of each call against that
record. Torch-free: it imports JAX, NumPy and `tpu_kernels.chip.load` only.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import jax
import jax.numpy as jnp

from tpu_kernels.chip import load, synthetic

_MIB = 2**20
BF16, F32 = jnp.bfloat16, jnp.float32
_SHORT = {jnp.dtype(BF16): "bf16", jnp.dtype(F32): "f32", jnp.dtype(jnp.int32): "i32"}


@dataclass(frozen=True)
class Call:
    """One kernel call of the corpus."""

    id: str  # unique and stable: "rmsnorm_bwd/bf16[8192,4096]/block_rows=256"
    kernel: str  # "rmsnorm.rmsnorm_backward", "template.flash_attention", "synthetic.copy"
    fn: Callable  # a JAX function of the array arguments only (statics bound)
    args: tuple  # a jax.ShapeDtypeStruct per array argument
    note: str = ""  # the case it covers
    traces: bool = True  # False: refused in Python while tracing (a block the kernel rejects)


def _sds(shape: tuple[int, ...], dtype) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(tuple(shape), dtype)


def _shape_text(s: jax.ShapeDtypeStruct) -> str:
    return f"{_SHORT[jnp.dtype(s.dtype)]}[{','.join(map(str, s.shape))}]"


def _call(
    name: str,
    kernel: str,
    fn: Callable,
    args: tuple,
    note: str = "",
    traces: bool = True,
    shape: str | None = None,
    **statics,
) -> Call:
    """A Call of `fn` with `statics` bound. Its id: `name`, the shape that fixes the others
    (`shape`, default the first argument's) and every static."""
    knobs = ",".join(f"{k}={v}" for k, v in statics.items())
    shape = shape or _shape_text(args[0])
    return Call(
        f"{name}/{shape}/{knobs}", kernel, functools.partial(fn, **statics), tuple(args), note, traces
    )


# -- row kernels ---------------------------------------------------------------------------

WIDTHS_BF16 = (1024, 4096, 14336)
WIDTHS_F32 = (8192,)
VOCAB = (32768, 65536, 131072, 262144)
# Double-buffered input and output blocks of a row kernel, in MiB: block_rows is chosen so that
# they add up to about this. Dense around the 16 MiB default scoped limit of v5e, whatever the
# body's temporaries add.
ROW_TARGETS_MIB = (4, 10, 18, 28)
ROWS = 8192


def _row_block(target_mib: float, arrays: int, width: int, itemsize: int) -> int:
    """block_rows making `arrays` double-buffered (rows, width) blocks about target_mib MiB."""
    rows = int(target_mib * _MIB) // (2 * arrays * width * itemsize)
    return max(8, rows // 8 * 8)


@dataclass(frozen=True)
class _RowKernel:
    name: str  # the id prefix
    kernel: str
    fn: Callable
    arrays: int  # full-width blocks a step (inputs and outputs)
    args: Callable[[int, int, object], tuple]  # (rows, width, dtype) -> ShapeDtypeStructs

    def call(self, rows: int, d: int, dtype, note: str, block_rows: int) -> Call:
        return _call(self.name, self.kernel, self.fn, self.args(rows, d, dtype), note, block_rows=block_rows)


def _rmsnorm_args(rows: int, d: int, dtype) -> tuple:
    return (_sds((rows, d), dtype), _sds((d,), dtype))


def _rmsnorm_bwd_args(rows: int, d: int, dtype) -> tuple:
    return (_sds((rows, d), dtype), _sds((d,), dtype), _sds((rows, 1), F32), _sds((rows, d), dtype))


def _row_kernels() -> list[_RowKernel]:
    rms = load.family("rmsnorm").pallas
    soft = load.family("softmax").pallas
    sa = load.family("scale_add").pallas
    rr = load.template("row_reduction")
    ew = load.template("elementwise")
    one = lambda rows, d, dtype: (_sds((rows, d), dtype),)  # noqa: E731
    two = lambda rows, d, dtype: (_sds((rows, d), dtype), _sds((rows, d), dtype))  # noqa: E731
    return [
        _RowKernel("rmsnorm", "rmsnorm.rmsnorm", rms.rmsnorm, 2, _rmsnorm_args),
        _RowKernel("rmsnorm_bwd", "rmsnorm.rmsnorm_backward", rms.rmsnorm_backward, 3, _rmsnorm_bwd_args),
        _RowKernel("softmax", "softmax.softmax", soft.softmax, 2, one),
        _RowKernel("softmax_bwd", "softmax.softmax_backward", soft.softmax_backward, 3, two),
        _RowKernel("scale_add", "scale_add.scale_add", sa.scale_add, 3, two),
        _RowKernel("t_row_reduction", "template.row_reduction", rr.row_reduction, 2, _rmsnorm_args),
        _RowKernel(
            "t_row_reduction_bwd",
            "template.row_reduction_backward",
            rr.row_reduction_backward,
            3,
            _rmsnorm_bwd_args,
        ),
        _RowKernel("t_elementwise", "template.elementwise", ew.elementwise, 3, two),
    ]


def _row_calls() -> Iterator[Call]:
    kernels = _row_kernels()
    shipped = kernels[:5]
    for k in kernels:
        widths = [(w, BF16) for w in (WIDTHS_BF16 if k in shipped else (4096, 16384))]
        widths += [(w, F32) for w in (WIDTHS_F32 if k in shipped else (4096,))]
        for d, dtype in widths:
            itemsize = jnp.dtype(dtype).itemsize
            for target in ROW_TARGETS_MIB:
                br = _row_block(target, k.arrays, d, itemsize)
                note = f"row kernel, in and out blocks about {target} MiB double-buffered"
                if itemsize == 2:
                    note += ", bf16 upcast to float32 in the body"
                yield k.call(ROWS, d, dtype, note, br)
    # The shipped rmsnorm_backward at its own shipped example (refused on the chip though the
    # first check said 12.3 MiB) and its neighbours.
    for br in (64, 128, 512):
        yield kernels[1].call(8192, 4096, BF16, "shipped example's neighbours", br)
    yield kernels[1].call(8192, 4096, BF16, "the shipped example, float32 temporaries", 256)
    # Vocabulary-wide softmax rows: a few rows make a block of megabytes.
    for k in (kernels[2], kernels[3]):
        for d in VOCAB:
            for dtype in (BF16, F32):
                if dtype == F32 and d > 65536:
                    continue
                for br in (8, 16, 32) if dtype == BF16 else (8,):
                    yield k.call(4096, d, dtype, "vocabulary-wide rows", br)
    # ... and at the default: too wide for a whole-row block, column-tiled with a tile of rows
    # staged in VMEM scratch (a 3-axis grid, the limit raised)
    for k in (kernels[2], kernels[3]):
        for d in (131072, 262144):
            for dtype in (BF16, F32):
                yield k.call(512, d, dtype, "vocabulary rows at the default: column-tiled, rows staged in VMEM", None)
    # Row counts from 8 to 16384 at one width, the block oversize for the small ones (one-step).
    for k in (kernels[0], kernels[2], kernels[4]):
        for rows in (8, 64, 512, 2048, 16384):
            one_step = ", block_rows >= rows: one-step grid" if rows <= 512 else ""
            yield k.call(rows, 4096, BF16, "row count sweep" + one_step, 512)


def _body_calls() -> Iterator[Call]:
    """The shipped row kernels' bodies through a plain pallas_call without a raised VMEM limit:
    the wrappers size their blocks and raise the limit themselves, so these are the calls that
    meet v5e's 16 MiB default on both sides."""
    rms, soft = load.family("rmsnorm").pallas, load.family("softmax").pallas
    sa = load.family("scale_add").pallas
    f32 = jnp.float32

    def rms_args(rows: int, d: int, dtype) -> tuple:  # the weight as the (1, d) row the body reads
        return (_sds((rows, d), dtype), _sds((1, d), dtype))

    def rms_bwd_args(rows: int, d: int, dtype) -> tuple:
        return (_sds((rows, d), dtype), _sds((1, d), dtype), _sds((rows, 1), F32), _sds((rows, d), dtype))

    bodies = (
        ("body_rmsnorm", functools.partial(rms._fwd_kernel, eps=1e-6), ("row", "weight"), 2, rms_args,
         lambda dt: (("row", dt), ("per_row", f32))),
        ("body_rmsnorm_bwd", rms._bwd_kernel, ("row", "weight", "per_row", "row"), 3, rms_bwd_args,
         lambda dt: (("row", dt), ("partial", f32))),
        ("body_softmax", soft._fwd_kernel, ("row",), 2, lambda r, d, dt: (_sds((r, d), dt),),
         lambda dt: (("row", dt),)),
        ("body_softmax_bwd", soft._bwd_kernel, ("row", "row"), 3, lambda r, d, dt: (_sds((r, d), dt),) * 2,
         lambda dt: (("row", dt),)),
        ("body_scale_add", functools.partial(sa._kernel, alpha=0.5), ("row", "row"), 3,
         lambda r, d, dt: (_sds((r, d), dt),) * 2, lambda dt: (("row", dt),)),
        ("body_scale_add_bwd", functools.partial(sa._scaled_kernel, alpha=0.5), ("row",), 2,
         lambda r, d, dt: (_sds((r, d), dt),), lambda dt: (("row", dt),)),
    )  # fmt: skip
    for name, body, kinds, arrays, args, outs in bodies:
        kernel = f"synthetic.row_body[{name[5:]}]"
        for d, dtype in BODY_WIDTHS:
            itemsize = jnp.dtype(dtype).itemsize
            for target in BODY_TARGETS_MIB:
                br = _row_block(target, arrays, d, itemsize)
                fn = functools.partial(synthetic.row_body, body, kinds=kinds, outs=outs(dtype))
                note = f"shipped body, default limit, in and out blocks about {target} MiB double-buffered"
                yield _call(name, kernel, fn, args(ROWS, d, dtype), note, block_rows=br)
        if name in ("body_rmsnorm", "body_rmsnorm_bwd"):  # the blocks bench/reports/chip_v5e_tune.json timed
            for br in (8, 16, 32, 64, 128, 256, 512, 1024, 2048):
                fn = functools.partial(synthetic.row_body, body, kinds=kinds, outs=outs(BF16))
                yield _call(name, kernel, fn, args(ROWS, 4096, BF16), "shipped body, tuning sweep", block_rows=br)
        for target in (8, 12, 16, 24, 32):  # one-step grids: the block is the whole array
            br = _row_block(target, arrays, 4096, 2)
            fn = functools.partial(synthetic.row_body, body, kinds=kinds, outs=outs(BF16))
            note = f"shipped body, one-step grid, {target} MiB if double-buffered"
            yield _call(name, kernel, fn, args(br, 4096, BF16), note, block_rows=br)


BODY_TARGETS_MIB = (6, 10, 12, 14, 16, 20, 28)
BODY_WIDTHS = [(w, BF16) for w in (2048, 4096, 5120, 8192, 14336)] + [(w, F32) for w in (2048, 8192)]


# -- matmuls ---------------------------------------------------------------------------------

MATMUL_SHAPES = ((1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 4096, 14336))
# (block_m, block_n, block_k): from MXU tiles to oversize ones.
MATMUL_BLOCKS = (
    (128, 128, 128),
    (256, 256, 256),
    (512, 512, 512),
    (512, 512, 2048),
    (1024, 1024, 256),
    (1024, 1024, 512),
    (1024, 1024, 1024),
    (512, 1024, 1024),
    (1024, 1024, 2048),
    (2048, 1024, 512),
    (2048, 2048, 256),
    (2048, 2048, 512),
    (2048, 2048, 2048),
)


def _mm_args(m: int, k: int, n: int, dtype) -> tuple:
    return (_sds((m, k), dtype), _sds((k, n), dtype))


def _mm_shape(args: tuple) -> str:
    """ "bf16[M,K,N]" of a matmul's (a, b)."""
    (m, k), n = args[0].shape, args[1].shape[1]
    return f"{_SHORT[jnp.dtype(args[0].dtype)]}[{m},{k},{n}]"


def _mm_call(name: str, kernel: str, fn: Callable, args: tuple, note: str, **kw) -> Call:
    return _call(name, kernel, fn, args, note, shape=_mm_shape(args), **kw)


def _matmul_calls() -> Iterator[Call]:
    mm = functools.partial(_mm_call, "matmul", "matmul.matmul", load.family("matmul").pallas.matmul)
    tmm = load.template("matmul")
    t_fwd = functools.partial(_mm_call, "t_matmul", "template.matmul", tmm.matmul)
    t_bwd = functools.partial(_mm_call, "t_matmul_bwd", "template.matmul_backward", tmm.matmul_backward)
    for dtype, shapes in ((BF16, MATMUL_SHAPES[1:]), (F32, MATMUL_SHAPES[2:3])):
        for m, k, n in shapes:
            for bm, bn, bk in MATMUL_BLOCKS:
                if max(bm, bn, bk) > max(m, k, n):
                    continue
                note = "float32 scratch accumulator" + (
                    ", blocks clamped to the dims" if bm > m or bk > k else ""
                )
                yield mm(_mm_args(m, k, n, dtype), note, block_m=bm, block_n=bn, block_k=bk)
    for m in (512, 1024, 1536):  # every block the whole operand
        yield mm(_mm_args(m, m, m, BF16), "one-step grid", block_m=m, block_n=m, block_k=m)
    blocks = ((256, 256, 256), (512, 512, 512), (1024, 1024, 512), (1024, 1024, 1024), (2048, 1024, 512))
    for m, k, n in ((2048, 2048, 2048), (8192, 4096, 14336)):
        for bm, bn, bk in (*blocks, (2048, 2048, 512)):
            yield t_fwd(_mm_args(m, k, n, BF16), "template matmul", block_m=bm, block_n=bn, block_k=bk)
    args = _mm_args(4096, 4096, 4096, BF16) + (_sds((4096, 4096), BF16),)
    for bm, bn, bk in blocks:
        note = "template matmul backward (two kernels, transposed operands)"
        yield t_bwd(args, note, block_m=bm, block_n=bn, block_k=bk)
    args = _mm_args(1024, 1024, 1024, BF16)
    note = "refused while tracing: block_{} not a multiple of 128"
    yield t_fwd(args, note.format("m"), traces=False, block_m=200, block_n=256, block_k=256)
    yield mm(args, note.format("k"), traces=False, block_m=256, block_n=256, block_k=100)


# -- attention -------------------------------------------------------------------------------

ATTN_SHAPES = ((1, 8, 2048, 128), (1, 8, 4096, 128), (1, 8, 8192, 64))
ATTN_BLOCKS = (
    (128, 128),
    (256, 256),
    (512, 512),
    (512, 1024),
    (1024, 512),
    (1024, 1024),
    (2048, 512),
    (512, 2048),
    (1024, 2048),
    (2048, 1024),
    (2048, 2048),
    (4096, 512),
)


def _attn_args(b: int, h: int, s: int, d: int, dtype) -> tuple:
    return tuple(_sds((b, h, s, d), dtype) for _ in range(3))


def _attention_calls() -> Iterator[Call]:
    fa = load.template("flash_attention")
    fwd = functools.partial(_call, "t_flash", "template.flash_attention", fa.flash_attention)
    bwd = functools.partial(
        _call, "t_flash_bwd", "template.flash_attention_backward", fa.flash_attention_backward
    )
    for shape in ATTN_SHAPES:
        for bq, bk in ATTN_BLOCKS:
            if max(bq, bk) > shape[2]:
                continue
            note = "float32 scores and probabilities (block_q x block_k) in the body, scratch"
            yield fwd(_attn_args(*shape, BF16), note, causal=shape[2] == 4096, block_q=bq, block_k=bk)
    for bq, bk in ((256, 256), (512, 512), (1024, 1024), (2048, 1024)):
        yield fwd(_attn_args(1, 8, 2048, 128, F32), "float32 attention", causal=False, block_q=bq, block_k=bk)
    for shape in ((1, 8, 2048, 128), (1, 8, 4096, 64)):
        b, h, s, d = shape
        args = _attn_args(*shape, BF16) + (_sds(shape, BF16), _sds((b, h, s), F32), _sds(shape, BF16))
        note = "dK/dV and dQ kernels: several float32 (block_q x block_k) temporaries"
        for bq, bk in (
            (128, 128),
            (256, 256),
            (512, 512),
            (512, 1024),
            (1024, 512),
            (1024, 1024),
            (2048, 2048),
        ):
            yield bwd(args, note, causal=False, block_q=bq, block_k=bk)
    note = "refused while tracing: sequence not a multiple of block_k"
    args = _attn_args(1, 4, 1000, 64, BF16)
    yield fwd(args, note, traces=False, causal=False, block_q=128, block_k=512)


# -- synthetic kernels -------------------------------------------------------------------------


def _synthetic_calls() -> Iterator[Call]:
    cols = 4096
    copy = functools.partial(_call, "copy", "synthetic.copy", synthetic.copy)
    scratch = functools.partial(_call, "scratch", "synthetic.with_scratch", synthetic.with_scratch)
    for dtype in (BF16, F32):
        itemsize = jnp.dtype(dtype).itemsize
        # bf16 adds totals just under 16 MiB: they would show any headroom the compiler kept (none).
        fine = (15.5, 15.75, 15.875) if dtype == BF16 else ()
        for total in (8, 12, 15, *fine, 16, 17, 20, 24, 28, 32, 40, 48):
            rows = int(total * _MIB) // (2 * cols * itemsize)  # in + out, single-buffered: `total` MiB
            note = f"one-step grid: block = whole array, {total} MiB single-buffered"
            yield copy((_sds((rows, cols), dtype),), note, block_rows=rows)
            note = f"two-step grid: {2 * total} MiB double-buffered"
            yield copy((_sds((2 * rows, cols), dtype),), note, block_rows=rows)
    limits = ((12, 8), (24, 32), (30, 32), (32, 32), (40, 32), (48, 64), (60, 64), (64, 64), (72, 64))
    for buffers, limit in (*limits, (80, 100), (96, 100), (110, 100), (100, 128)):
        rows = buffers * _MIB // (4 * cols * 2)  # in + out double-buffered, bf16
        note = f"vmem_limit_bytes={limit} MiB, {buffers} MiB of buffers"
        yield copy((_sds((4 * rows, cols), BF16),), note, block_rows=rows, vmem_limit_bytes=limit * _MIB)
    x = (_sds((8192, cols), BF16),)
    sizes = ((256, 256), (256, 1024), (256, 2048), (512, 512), (512, 1024), (512, 2048), (1024, 1024))
    for block_rows, scratch_rows in (*sizes, (1024, 2048), (256, 3072)):
        note = f"float32 VMEM scratch of {scratch_rows * cols * 4 // _MIB} MiB"
        yield scratch(x, note, block_rows=block_rows, scratch_rows=scratch_rows)
    for block_rows, scratch_rows in ((1024, 2048), (1024, 4096)):
        note = "scratch under a raised vmem_limit_bytes (64 MiB)"
        yield scratch(x, note, block_rows=block_rows, scratch_rows=scratch_rows, vmem_limit_bytes=64 * _MIB)
    for block_rows in (64, 256, 512, 1024, 1536, 2048):
        args = (_sds((16,), jnp.int32), _sds((16 * block_rows, cols), BF16))
        note = "scalar prefetch: a block index table in SMEM"
        yield _call(
            "gather",
            "synthetic.gather_blocks",
            synthetic.gather_blocks,
            args,
            note,
            shape=_shape_text(args[1]),
            block_rows=block_rows,
        )
    for page_rows, page_cols in (
        (64, 4096),
        (256, 4096),
        (512, 4096),
        (1024, 4096),
        (512, 8192),
        (1024, 8192),
    ):
        args = (_sds((8,), jnp.int32), _sds((8, 16), jnp.int32), _sds((128 * page_rows, page_cols), BF16))
        note = "two scalar-prefetch tables, float32 scratch accumulator"
        yield _call(
            "paged_sum",
            "synthetic.paged_sum",
            synthetic.paged_sum,
            args,
            note,
            shape=_shape_text(args[2]),
            page_rows=page_rows,
        )
    for live in (1, 2, 4, 8):
        for block_rows in (128, 256, 512, 1024):
            note = f"{live} float32 intermediates of the block's shape live"
            yield _call(
                "live",
                "synthetic.live_temporaries",
                synthetic.live_temporaries,
                x,
                note,
                block_rows=block_rows,
                live=live,
            )
    for n in (2, 4, 6):
        for block_rows in (128, 256, 512):
            yield _call(
                f"add{n}",
                "synthetic.add_n",
                synthetic.add_n,
                x * n,
                f"{n} inputs, one output",
                block_rows=block_rows,
            )


@functools.cache
def _all_calls() -> tuple[Call, ...]:
    found: dict[str, Call] = {}
    for c in (*_body_calls(), *_row_calls(), *_matmul_calls(), *_attention_calls(), *_synthetic_calls()):
        if c.traces and not _traces(c):
            continue  # a block the kernel's wrapper refuses (its own VMEM cap): the chip is not asked
        found.setdefault(c.id, c)  # sections overlap (a sweep meets a grid): one call each
    return tuple(found.values())


def calls() -> list[Call]:
    """The corpus, in a fixed order; ids are unique. Built once (tracing each call to leave out
    blocks a wrapper refuses takes seconds)."""
    return list(_all_calls())


def _traces(call: Call) -> bool:
    try:
        jax.eval_shape(call.fn, *call.args)
    except ValueError:
        return False
    return True


# -- the chip's verdict ----------------------------------------------------------------------------

_MARKERS = ("RESOURCE_EXHAUSTED", "E1001", "CompileTimeScopedVmemOom", "vmem", "VMEM")


def error_text(e: BaseException, limit: int = 600) -> str:
    """About `limit` characters of an error: its start, and where the compiler names the cause
    (a VMEM out-of-memory) if that comes later."""
    text = f"{type(e).__name__}: {e}"
    if len(text) <= limit:
        return text
    at = min((i for i in (text.find(m) for m in _MARKERS) if i >= 0), default=-1)
    if at < limit - 200:
        return text[:limit]
    return text[:150] + " ... " + text[at - 50 : at - 50 + limit - 155]


def compile_verdict(call: Call) -> dict:
    """Compile `call` for the attached device: {"id", "compiles", "error", "compile_s"}."""
    start = time.perf_counter()
    try:
        jax.jit(call.fn).lower(*call.args).compile()
    except Exception as e:  # every failure is a verdict: the record says which
        return {
            "id": call.id,
            "compiles": False,
            "error": error_text(e),
            "compile_s": round(time.perf_counter() - start, 3),
        }
    return {
        "id": call.id,
        "compiles": True,
        "error": None,
        "compile_s": round(time.perf_counter() - start, 3),
    }


__all__ = ["Call", "calls", "compile_verdict", "error_text"]
