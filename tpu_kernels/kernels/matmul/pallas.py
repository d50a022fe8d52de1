"""Tiled matmul as a Pallas TPU kernel: (M, K) @ (K, N) with a float32 accumulator.

The grid is (M / bm, N / bn, K / bk), each rounded up. Each (i, j) output tile accumulates its
K tiles in float32: in a VMEM scratch buffer written out at the last k, or, for a
float32 result, in the output block itself (resident across k: no scratch and no
final copy); where one block covers K, the step writes its product at once, with no
accumulator. `matmul_add` (a @ b + c) starts the accumulator from c's tile instead of
zeros. The k axis is "arbitrary" (sequential: it carries the accumulator); i and j are
"parallel". Blocks are multiples of (8, 128) as Mosaic requires (a
block of a whole dimension that fits in one is that dimension).

float32 products follow the matmul precision the kernel is traced at
(runtime/precision.py): one bf16 pass at "default", three at "high"
(`mosaic_precision.dot`: the split product XLA's dot computes at HIGH, which
Mosaic refuses as a precision), Mosaic's HIGHEST at "highest".

Every shape runs with every legal block, and no operand is copied to pad it: a block that does
not divide M or N leaves a partial block at the edge (its rows and columns past the array are
computed from whatever the edge's buffer holds and dropped on the write; each output element
reads only its own row of a and column of b), and one that does not divide K leaves a partial
last K block, which the kernel masks to zeros in both operands before its dot. A block size,
tuned or given, never makes a call fail unless its VMEM need passes what a shipped kernel may
ask for (`_vmem.CAP`: refused with the sizes that fit). Unset blocks take `blocks.choose`: the
candidates the cost model prices least at the call's shape (blocks.py).

VMEM per grid step (`blocks.vmem_need`): double-buffered inputs and output, the float32
accumulator (bf16 results only), each pass's float32 result before it is added, and a
multi-pass product's split blocks; the kernel raises Mosaic's scoped limit where that passes
the chip's default (`_vmem.compiler_params`; v5e's default is 16 MiB).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from jax import export
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from tpu_kernels.kernels import _vmem
from tpu_kernels.kernels._blocks import LANES, SUBLANES, check_aligned, cost, is_empty, require_float
from tpu_kernels.kernels._config import BlockConfig
from tpu_kernels.kernels.matmul import blocks
from tpu_kernels.runtime import mosaic_precision


@dataclass(frozen=True)
class Config(BlockConfig):
    """matmul's blocks (`_config`): a grid step's block_m rows of a, block_n columns of b, and
    block_k of their shared dimension; one triple for the forward and the backward's products."""

    block_m: int | None = None
    block_n: int | None = None
    block_k: int | None = None
    # MXU-sized tiles up to the 1024-2048 blocks that matched XLA on a v5e
    # (bench/reports/chip_v5e.json, "tune"); blocks larger than a dimension become the whole
    # dimension (`_block`), and a config whose VMEM need passes what a shipped kernel may ask
    # for is refused (`blocks.vmem_need`, `_vmem.fits`).
    SPACE = {"block_m": [256, 512, 1024, 2048], "block_n": [256, 512, 1024, 2048], "block_k": [256, 512, 1024]}

    @classmethod
    def default(cls, shape: tuple[int, int, int], dtype, precision: str | None = None) -> Config:
        """The blocks of an [m, k] @ [k, n] call (`shape` (m, k, n)) that leaves them unset: the
        cost model's choice (`blocks.default`) for operands of `dtype` at the MXU passes of
        `precision` (the one in effect when None: `mxu_passes`)."""
        m, k, n = shape
        return cls(*blocks.default(m, k, n, jnp.dtype(dtype).itemsize, mxu_passes(dtype, precision)))


def mxu_passes(dtype, precision: str | None = None) -> int:
    """bf16 MXU passes per product that the kernel's VMEM need counts for operands of `dtype` at
    JAX matmul precision `precision` (the one in effect, `mosaic_precision.requested()`, when
    None): one for 16-bit operands and float32 at "default"; three for float32 at a HIGH-class
    name (`mosaic_precision.dot`) or at "highest" (Mosaic's own split, counted as the same)."""
    if jnp.dtype(dtype).itemsize < 4:
        return 1
    name = mosaic_precision.requested() if precision is None else precision
    try:
        p = jax.lax.Precision(name) if name is not None else jax.lax.Precision.DEFAULT
    except ValueError:  # a dot algorithm preset: Mosaic refuses it whatever the blocks
        return 1
    return 1 if p == jax.lax.Precision.DEFAULT else 3


def _one_step(n_k, k_tail: int) -> bool:
    """Whether a grid's contraction is one whole block (block_k covers K): its kernel writes the
    product to the output at once, with no accumulator to zero, add into and copy out."""
    return isinstance(n_k, int) and n_k == 1 and not k_tail


def _kernel(a_ref, b_ref, *refs, n_k: int, k_tail: int = 0, contract: tuple[int, int] = (1, 0),
            addend: bool = False):
    """One (i, j, k) step. `contract`: the dims of the a and b blocks that the dot sums over
    ((1, 0): a @ b; (1, 1): a @ b.T; (0, 0): a.T @ b, for the backward). `k_tail`: the valid
    entries along those dims in the last K block when bk does not divide K (0 when it does);
    past them the buffers hold whatever the edge's copy left there, so both operands are masked
    to zeros (a select: a NaN left there stays out). `addend`: refs start with c's (bm, bn)
    block, which the accumulator starts from (`matmul_add`)."""
    c_ref, (o_ref, *scratch) = (refs[0], refs[1:]) if addend else (None, refs)
    if _one_step(n_k, k_tail):  # the product goes straight to the output: no accumulator
        acc = jnp.promote_types(o_ref.dtype, jnp.float32)
        product = mosaic_precision.dot(a_ref[...], b_ref[...], preferred_element_type=acc, contract=contract)
        o_ref[...] = (product if c_ref is None else product + c_ref[...].astype(acc)).astype(o_ref.dtype)
        return
    acc_ref = scratch[0] if scratch else o_ref  # a float32 result accumulates in place
    k = pl.program_id(2)

    @pl.when(k == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref) if c_ref is None else c_ref[...].astype(acc_ref.dtype)

    def accumulate(a, b):
        acc_ref[...] += mosaic_precision.dot(a, b, preferred_element_type=acc_ref.dtype, contract=contract)

    if k_tail:

        @pl.when(k < n_k - 1)
        def _whole():
            accumulate(a_ref[...], b_ref[...])

        @pl.when(k == n_k - 1)
        def _tail():
            a, b = a_ref[...], b_ref[...]
            a = jnp.where(jax.lax.broadcasted_iota(jnp.int32, a.shape, contract[0]) < k_tail, a, jnp.zeros_like(a))
            b = jnp.where(jax.lax.broadcasted_iota(jnp.int32, b.shape, contract[1]) < k_tail, b, jnp.zeros_like(b))
            accumulate(a, b)

    else:
        accumulate(a_ref[...], b_ref[...])

    if scratch:

        @pl.when(k == n_k - 1)
        def _store():
            o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def _block(name: str, dim: int, block: int | None, default: int, multiple: int) -> int:
    """The block size along one dimension: the requested one, or the whole dim when it fits in
    one block; `default` when none is requested (legal by construction: `blocks.candidates`).
    A requested one must be legal whatever the shape: an autotuned block is checked once and
    then used at every shape."""
    if block is None:
        return default
    check_aligned(name, block, multiple)
    if export.is_symbolic_dim(dim):  # a symbolic size, while deriving shapes
        return block
    return dim if dim <= block else block


def _check(a: jax.Array, b: jax.Array) -> None:
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul: expected a [M, K] and b [K, N], got {a.shape} and {b.shape}.")
    require_float("matmul", a=a, b=b)
    if a.dtype != b.dtype:
        raise ValueError(f"matmul: a and b must have one dtype, got {a.dtype} and {b.dtype}.")


def _add_need(bm: int, bn: int, bk: int, itemsize: int, passes: int = 1) -> int:
    """A `matmul_add` grid step's VMEM: matmul's, and the addend's double-buffered block."""
    return blocks.vmem_need(bm, bn, bk, itemsize, passes) + blocks.addend_need(bm, bn, itemsize)


def _blocks(m, k, n, dtype, block_m, block_n, block_k, *, names=("block_m", "block_n", "block_k"),
            multiples=(SUBLANES, LANES, LANES), need=blocks.vmem_need, op: str = "matmul") -> tuple[int, int, int, int]:
    """(bm, bn, bk, passes) of an [m, k] @ [k, n] product: the blocks given, else the default's,
    each capped at its dimension; a given block must be a multiple of its `multiples` entry
    (named by `names` in the error), and the VMEM `need` fit under the cap. The default is
    `Config.default`, or for a kernel that holds more than matmul's (`need`) `blocks.choose`
    under that need."""
    itemsize, npass = jnp.dtype(dtype).itemsize, mxu_passes(dtype)
    if need is blocks.vmem_need or any(export.is_symbolic_dim(d) for d in (m, k, n)) or 0 in (m, k, n):
        default = Config.default((m, k, n), dtype)
        dm, dn, dk = default.block_m, default.block_n, default.block_k
    else:
        chosen = blocks.choose(m, k, n, itemsize, npass, need)
        dm, dn, dk = chosen.m, chosen.n, chosen.k
    bm = _block(names[0], m, block_m, dm, multiples[0])
    bn = _block(names[1], n, block_n, dn, multiples[1])
    bk = _block(names[2], k, block_k, dk, multiples[2])
    need = need(bm, bn, bk, itemsize, npass)
    if not export.is_symbolic_dim(need) and not _vmem.fits(need):
        blocks_given = ", ".join(names)
        raise ValueError(
            f"{op}: blocks ({bm}, {bn}, {bk}) ({blocks_given}) need about {need / _vmem.MIB:.0f} MiB "
            f"of VMEM in {jnp.dtype(dtype)}, over the {_vmem.CAP // _vmem.MIB} MiB a shipped kernel may use; pass "
            "smaller blocks, or leave them unset for the call's defaults."
        )
    return bm, bn, bk, npass


def predicted_seconds(chip: Any, a: Any, b: Any, *, block_m: int | None = None, block_n: int | None = None,
                      block_k: int | None = None) -> float:
    """A call's seconds as the default blocks' cost model prices it (`blocks.seconds`) on a chip
    with `chip`'s figures (the tuner's `ChipFigures`), at the blocks the call would run with:
    the op's `cost=`, which the tuner ranks predicted configs by. `a` and `b`: arrays, tensors
    or shape-dtype structs."""
    (m, k), n = tuple(a.shape), b.shape[1]
    dtype = jnp.dtype(str(a.dtype).removeprefix("torch."))
    if 0 in (m, k, n):
        return blocks.seconds(m, k, n, 1, 1, 1, dtype.itemsize)
    bm, bn, bk, npass = _blocks(m, k, n, dtype, block_m, block_n, block_k)
    return blocks.seconds(m, k, n, bm, bn, bk, dtype.itemsize, npass, chip=blocks.Chip.like(chip))


def predicted_preference(a: Any, b: Any, *, block_m: int | None = None, block_n: int | None = None,
                         block_k: int | None = None) -> tuple:
    """Where a config stands in a tie of `predicted_seconds` (least first): `blocks.preference`
    of the blocks the call would run with, the rule `blocks.choose` breaks its own ties by."""
    (m, k), n = tuple(a.shape), b.shape[1]
    if 0 in (m, k, n):
        return ()
    dtype = jnp.dtype(str(a.dtype).removeprefix("torch."))
    bm, bn, bk, _ = _blocks(m, k, n, dtype, block_m, block_n, block_k)
    return blocks.preference(m, k, n, bm, bn, bk)


predicted_seconds.tie = blocks.TIE  # type: ignore[attr-defined]  # within it prices tie, as in blocks.choose
predicted_seconds.prefer = predicted_preference  # type: ignore[attr-defined]  # and the tie goes as there


def matmul(
    a: jax.Array,
    b: jax.Array,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    block_k: int | None = None,
) -> jax.Array:
    """a @ b for 2-D a [M, K] and b [K, N]; the result has a's dtype.

    Blocks left unset (None) take `blocks.choose` at the call's shape; each is capped at its
    dimension."""
    _check(a, b)
    (m, k), n = a.shape, b.shape[1]
    bm, bn, bk, npass = _blocks(m, k, n, a.dtype, block_m, block_n, block_k)
    if is_empty(a, b):  # as torch: an empty result, or zeros when only K is 0 (an empty sum)
        return jnp.zeros((m, n), a.dtype)
    return _tiled(a, b, bm, bn, bk, npass)


def matmul_add(
    a: jax.Array,
    b: jax.Array,
    c: jax.Array,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    block_k: int | None = None,
) -> jax.Array:
    """a @ b + c for a [M, K], b [K, N] and c [M, N] of one dtype (a residual added to a
    projection): the accumulator starts from c's tile, so the sum is rounded once and c is read
    once, with no pass over the [M, N] result after the product. Its gradients are matmul's and
    grad_out itself (c's). Blocks as `matmul`'s, their VMEM need counting c's block."""
    _check(a, b)
    (m, k), n = a.shape, b.shape[1]
    if tuple(c.shape) != (m, n) or c.dtype != a.dtype:
        raise ValueError(f"matmul_add: expected c [{m}, {n}] of a's dtype {a.dtype}, got {tuple(c.shape)} {c.dtype}.")
    bm, bn, bk, npass = _blocks(m, k, n, a.dtype, block_m, block_n, block_k, need=_add_need, op="matmul_add")
    if is_empty(a, b, c):
        return c  # an empty sum adds nothing
    return _tiled(a, b, bm, bn, bk, npass, addend=c)


def matmul_backward(
    a: jax.Array,
    b: jax.Array,
    grad_out: jax.Array,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    block_k: int | None = None,
) -> tuple[jax.Array, jax.Array]:
    """(grad_a, grad_b) = (grad_out @ b.T, a.T @ grad_out) for out = a @ b: two calls of the
    kernel that read b and a in place, transposed in the dot (`_kernel`'s `contract`), never
    copied to a transposed layout. Each product keeps the forward's block along each of M, K
    and N where the forward's blocks were given (grad_a's (M, K) tiles sum over N in block_n
    steps; grad_b's (K, N) tiles over M in block_m steps), and takes its own default where they
    were not."""
    _check(a, b)
    (m, k), n = a.shape, b.shape[1]
    if grad_out.shape != (m, n):
        raise ValueError(f"matmul_backward: expected grad_out [{m}, {n}], got {grad_out.shape}.")
    g = grad_out.astype(a.dtype)
    # grad_a [M, K] = g [M, N] @ b[K, N].T: M rows, K columns, N summed
    am, ak, an, apass = _blocks(m, n, k, a.dtype, block_m, block_k, block_n,
                                names=("block_m", "block_k", "block_n"), multiples=(SUBLANES, LANES, LANES))
    # grad_b [K, N] = a[M, K].T @ g [M, N]: K rows (along a's lanes), N columns, M summed
    # (along a's and g's rows)
    bm_, bn_, bk_, bpass = _blocks(k, m, n, a.dtype, block_k, block_n, block_m,
                                   names=("block_k", "block_n", "block_m"), multiples=(LANES, LANES, SUBLANES))
    if is_empty(a, b, g):
        return jnp.zeros((m, k), a.dtype), jnp.zeros((k, n), a.dtype)
    grad_a = _tiled(g, b, am, ak, an, apass, transpose_b=True)
    grad_b = _tiled(a, g, bm_, bn_, bk_, bpass, transpose_a=True)
    return grad_a, grad_b


def _tiled(a: jax.Array, b: jax.Array, bm: int, bn: int, bk: int, npass: int, *,
           transpose_a: bool = False, transpose_b: bool = False, addend: jax.Array | None = None) -> jax.Array:
    """op(a) @ op(b) (+ addend) on the grid of (bm, bn, bk) blocks, op transposing a [K, M] a or
    an [N, K] b where asked (in the dot: the blocks are read as stored); edge blocks are partial
    (`_kernel`)."""
    m, k = a.shape[::-1] if transpose_a else a.shape
    n = b.shape[0] if transpose_b else b.shape[1]
    acc = jnp.promote_types(a.dtype, jnp.float32)
    need = (blocks.vmem_need if addend is None else _add_need)(bm, bn, bk, a.dtype.itemsize, npass)
    grid = (pl.cdiv(m, bm), pl.cdiv(n, bn), pl.cdiv(k, bk))
    k_tail = 0 if export.is_symbolic_dim(k) else k % bk
    if transpose_a:
        a_spec = pl.BlockSpec((bk, bm), lambda i, j, kk: (kk, i))
    else:
        a_spec = pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk))
    if transpose_b:
        b_spec = pl.BlockSpec((bn, bk), lambda i, j, kk: (j, kk))
    else:
        b_spec = pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j))
    contract = (0 if transpose_a else 1, 1 if transpose_b else 0)
    o_spec = pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j))
    kw = ({} if contract == (1, 0) else {"contract": contract}) | ({} if addend is None else {"addend": True})
    return pl.pallas_call(
        functools.partial(_kernel, n_k=grid[2], k_tail=k_tail, **kw),
        out_shape=jax.ShapeDtypeStruct((m, n), a.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=0,
            grid=grid,
            in_specs=[a_spec, b_spec] + ([] if addend is None else [o_spec]),
            out_specs=o_spec,
            scratch_shapes=[] if a.dtype == acc or _one_step(grid[2], k_tail) else [pltpu.VMEM((bm, bn), acc)],
        ),
        compiler_params=_vmem.compiler_params(("parallel", "parallel", "arbitrary"), need),
        cost_estimate=cost(2 * m * n * k * npass, 0, (m * k + k * n + m * n * (1 if addend is None else 2))
                           * a.dtype.itemsize),
    )(a, b, *(() if addend is None else (addend,)))
