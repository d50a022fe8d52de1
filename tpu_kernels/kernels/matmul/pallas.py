"""Tiled matmul as a Pallas TPU kernel: (M, K) @ (K, N) with a float32 accumulator.

The grid is (M / bm, N / bn, K / bk). Each (i, j) output tile accumulates its
K tiles in float32: in a VMEM scratch buffer written out at the last k, or, for a
float32 result, in the output block itself (resident across k: no scratch and no
final copy). The k axis is "arbitrary" (sequential: it carries the accumulator);
i and j are "parallel". Blocks are multiples of (8, 128) as Mosaic requires (a
block of a whole dimension that fits in one is that dimension); the defaults fill
the MXU on every TPU generation.

float32 products follow the matmul precision the kernel is traced at
(runtime/precision.py): one bf16 pass at "default", three at "high"
(`mosaic_precision.dot`: the split product XLA's dot computes at HIGH, which
Mosaic refuses as a precision), Mosaic's HIGHEST at "highest".

Every shape runs with every legal block: a dimension that is not a multiple of
its block is padded with zeros up to one (zeros in K add nothing to a dot
product; the padded rows of M and columns of N are sliced off the result), so
a block size, tuned or given, never makes a call fail unless its VMEM need
passes what a shipped kernel may ask for (`_vmem.CAP`: refused with the sizes
that fit). The padding costs a copy of the operands only at shapes that need
it; a default block halves (down to 256) where it would pad a dimension by more
than a sixteenth.

VMEM per grid step (`vmem_need`): double-buffered inputs 2 * (bm*bk + bk*bn) *
itemsize, double-buffered output 2 * bm*bn * itemsize, the float32 accumulator
(bf16 results only), each pass's float32 result before it is added, and a
multi-pass product's split blocks: 30 MiB for bf16 at the (1024, 2048, 512)
default, so the kernel raises Mosaic's scoped limit (`_vmem.compiler_params`;
v5e's default is 16 MiB).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import export
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from tpu_kernels.kernels import _vmem
from tpu_kernels.kernels._blocks import LANES, SUBLANES, check_aligned, cost, is_empty, require_float
from tpu_kernels.runtime import mosaic_precision

# The block sizes `tpu_kernels.autotune` chooses among (docs/autotuning.md): MXU-sized tiles up
# to the 1024-2048 blocks that matched XLA on a v5e (bench/reports/chip_v5e.json, "tune");
# blocks larger than a dimension become the whole dimension (_block), and a config whose VMEM
# need passes what a shipped kernel may ask for is refused (`vmem_need`, `_vmem.fits`).
TUNE = {"block_m": [256, 512, 1024, 2048], "block_n": [256, 512, 1024, 2048], "block_k": [256, 512, 1024]}

BLOCK_K = (1024, 512, 256)
"""A default block_k: the largest of these whose VMEM need fits beside the call's block_m and
block_n (fewer float32 accumulator updates per output). On a v5e (bench/reports/
chip_v5e_matmul_probe.json) block_k 1024 took the projection 8192x4096x1024 from 384 to 377 us
(XLA 364 us), and 512 is what fits beside (1024, 2048) bf16 blocks."""


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


def default_blocks(itemsize: int, passes: int = 1) -> tuple[int, int, int]:
    """(block_m, block_n, block_k) at a large shape when a call leaves them unset. On a v5e
    (bench/reports/chip_v5e.json, "tune"; chip_v5e_matmul_probe.json):
    - bf16: (1024, 2048, 512) ran at 0.97-1.0x of XLA's jnp.dot from 2048^3 to the FFN shape
      8192x4096x14336, where the old 256-blocks ran at 0.28-0.39x;
    - float32, one pass: (2048, 1024, 256), accumulating in the output block, 827 us at 4096^3
      against 885 us at (1024, 1024, 512) with a scratch accumulator (XLA: 725 us);
    - float32, three passes ("high", "highest"): (1024, 1024, 256), their split blocks and
      per-pass results taking the room.
    block_k is the largest of `BLOCK_K` that fits `_vmem.CAP` beside the other two (at a call's
    shape: `matmul`)."""
    bm, bn = (1024, 2048) if itemsize <= 2 else (2048, 1024) if passes == 1 else (1024, 1024)
    return bm, bn, _fitting_k(bm, bn, None, itemsize, passes)


def _fitting_k(bm: int, bn: int, k: int | None, itemsize: int, passes: int) -> int:
    """The largest default block_k (capped at `k` where given) whose VMEM need fits; the
    smallest when none does (the caller's check then says so)."""
    for cand in BLOCK_K:
        bk = cand if k is None else _block("block_k", k, _snug(k, cand), LANES)
        if export.is_symbolic_dim(bk) or _vmem.fits(vmem_need(bm, bn, bk, itemsize, passes)):
            return bk
    return bk


def _kernel(a_ref, b_ref, o_ref, *scratch, n_k: int):
    acc_ref = scratch[0] if scratch else o_ref  # a float32 result accumulates in place
    k = pl.program_id(2)

    @pl.when(k == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += mosaic_precision.dot(a_ref[...], b_ref[...], preferred_element_type=acc_ref.dtype)

    if scratch:

        @pl.when(k == n_k - 1)
        def _store():
            o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def _block(name: str, dim: int, block: int, multiple: int) -> int:
    """The block size along one dimension: the requested one, or the whole dim when it fits in
    one block. The requested one must be legal whatever the shape: an autotuned block is
    checked once and then used at every shape."""
    check_aligned(name, block, multiple)
    if export.is_symbolic_dim(dim):  # a symbolic size, while deriving shapes
        return block
    return dim if dim <= block else block


def _snug(dim: int, block: int) -> int:
    """A default block for `dim`: `block`, halved (not below 256) while it would pad `dim` by
    more than a sixteenth (1100 rows take 2 blocks of 1024, 948 of them padding; of 256, 180)."""
    if export.is_symbolic_dim(dim):
        return block
    while block > 256 and dim > block and _padded(dim, block) - dim > dim // 16:
        block //= 2
    return block


def _padded(dim: int, block: int) -> int:
    """`dim` rounded up to a multiple of `block` (concrete sizes; a symbolic one as it is:
    deriving shapes needs the result's shape only, which padding does not change)."""
    if export.is_symbolic_dim(dim):
        return dim
    return pl.cdiv(dim, block) * block


def matmul(
    a: jax.Array,
    b: jax.Array,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    block_k: int | None = None,
) -> jax.Array:
    """a @ b for 2-D a [M, K] and b [K, N]; the result has a's dtype.

    Blocks left unset (None) take `default_blocks` for the dtype; each is capped at its
    dimension."""
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul: expected a [M, K] and b [K, N], got {a.shape} and {b.shape}.")
    require_float("matmul", a=a, b=b)
    if a.dtype != b.dtype:
        raise ValueError(f"matmul: a and b must have one dtype, got {a.dtype} and {b.dtype}.")
    (m, k), n = a.shape, b.shape[1]
    itemsize, npass = a.dtype.itemsize, mxu_passes(a.dtype)
    dm, dn, _ = default_blocks(itemsize, npass)
    bm = _block("block_m", m, _snug(m, dm) if block_m is None else block_m, SUBLANES)
    bn = _block("block_n", n, _snug(n, dn) if block_n is None else block_n, LANES)
    bk = _fitting_k(bm, bn, k, itemsize, npass) if block_k is None else _block("block_k", k, block_k, LANES)
    need = vmem_need(bm, bn, bk, itemsize, npass)
    if not export.is_symbolic_dim(need) and not _vmem.fits(need):
        raise ValueError(
            f"matmul: blocks ({bm}, {bn}, {bk}) (block_m, block_n, block_k) need about {need / _vmem.MIB:.0f} MiB "
            f"of VMEM in {a.dtype}, over the {_vmem.CAP // _vmem.MIB} MiB a shipped kernel may use; pass "
            "smaller blocks, or leave them unset for the dtype's defaults."
        )
    if is_empty(a, b):  # as torch: an empty result, or zeros when only K is 0 (an empty sum)
        return jnp.zeros((m, n), a.dtype)
    mp, kp, np_ = _padded(m, bm), _padded(k, bk), _padded(n, bn)
    if (mp, kp) != (m, k):
        a = jnp.pad(a, ((0, mp - m), (0, kp - k)))
    if (kp, np_) != (k, n):
        b = jnp.pad(b, ((0, kp - k), (0, np_ - n)))
    out = _tiled(a, b, bm, bn, bk, npass)
    return out if (mp, np_) == (m, n) else out[:m, :n]


def vmem_need(bm: int, bn: int, bk: int, itemsize: int, passes: int = 1) -> int:
    """VMEM of one grid step: double-buffered a, b and output blocks, the float32 accumulator
    (a scratch buffer unless the result is float32), the float32 result of each of the product's
    `passes` before it is added (temporaries of the body), and for a multi-pass product the
    blocks split in two bf16 halves beside a float32 difference."""
    rows, cols = _vmem.padded_rows, _vmem.padded_cols
    ab = rows(bm, itemsize) * cols(bk) + rows(bk, itemsize) * cols(bn)
    out = rows(bm, itemsize) * cols(bn)
    acc = rows(bm, 4) * cols(bn) * 4
    need = 2 * (ab + out) * itemsize + (0 if itemsize == 4 else acc) + passes * acc
    if passes > 1:
        need += ab * (2 * 2 + 4)
    return need


def _tiled(a: jax.Array, b: jax.Array, bm: int, bn: int, bk: int, npass: int) -> jax.Array:
    """a @ b for dimensions that are multiples of their blocks."""
    (m, k), n = a.shape, b.shape[1]
    acc = jnp.promote_types(a.dtype, jnp.float32)
    need = vmem_need(bm, bn, bk, a.dtype.itemsize, npass)
    grid = (m // bm, n // bn, k // bk)
    return pl.pallas_call(
        functools.partial(_kernel, n_k=grid[2]),
        out_shape=jax.ShapeDtypeStruct((m, n), a.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=0,
            grid=grid,
            in_specs=[
                pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),
                pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j)),
            ],
            out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
            scratch_shapes=[] if a.dtype == acc else [pltpu.VMEM((bm, bn), acc)],
        ),
        compiler_params=_vmem.compiler_params(("parallel", "parallel", "arbitrary"), need),
        cost_estimate=cost(2 * m * n * k * npass, 0, (m * k + k * n + m * n) * a.dtype.itemsize),
    )(a, b)
