"""Matmul's blocks: what a grid step holds in VMEM, what a block choice costs, and the default.

A call that leaves its blocks unset takes `choose(m, k, n, itemsize, passes)`: of the candidate
blocks along each dimension (`candidates`) whose VMEM need fits (`vmem_need`, `_vmem.fits`),
the triples the cost model (`seconds`) prices within `TIE` of the least, and of those the one
`choose`'s tie rule picks. The kernel never copies its operands to pad them: a block that does not divide M or N leaves a partial block at the edge,
whose rows and columns outside the array are computed and dropped on the write; one that does
not divide K leaves a partial last K block, which the kernel masks to zeros (pallas.py). So the
price of a block that does not divide is the tail's wasted MXU work, which `seconds` counts,
never a copy.

Candidates along a dimension, in tiles of 128 (lanes for N and K, rows for M): for each target block (powers of two from 256 to the
dimension's cap), the block that splits the dimension into that target's number of blocks as
evenly as the tile allows (18944 columns at 2048: 10 blocks of 1920, 256 columns of tail, not
10 of 2048 with 1536), the target itself, and the whole dimension where it is within the cap. A
block narrower than 256 (the widest MXU, v6e's) is a candidate only where the whole dimension is.

The cost model, per call (`seconds`), with the grid (gm, gn, gk) the blocks give:

    steps * (max(mxu, hbm) + acc + STEP_S) + (first blocks + last output) / HBM + FIXED_S

- mxu: a step's 2*bm*bn*bk*passes flops at MXU_RATE; rows under the MXU's width (128 on a v5e)
  cost a full pass of it (a decode batch pays for the weight's load into the array);
- hbm: a step's a and b blocks (both change every step: k is the innermost axis), and the
  output block once per k sweep, at HBM_BYTES_S;
- acc: the float32 accumulator's update, ACC_S per element of the output block (at least 8
  rows), which the vector unit does after the dot, not beside it; none where block_k covers K
  (one K step: the kernel writes its product at once, with no accumulator);
- STEP_S: each step's fixed cost (DMA issue, synchronisation); FIXED_S: a call's.

Its five figures are a least-squares fit in log time to the v5e's measured matmul sweeps
(bench/reports/chip_v5e_tune.json: the configs whose blocks divide their shape, since the kernel
then padded the others with a copy; tests/kernels/test_matmul_blocks.py checks the fit). The
TPU v5e is the chip the defaults are sized for; other generations take the same choice, which
the model is not fitted to.

The blocks the tuner chooses among are `pallas.Config.SPACE` (the op's `tune=`; the chip
runner's sweeps start from it too): the default (`choose`) is not limited to them, the tuner is.

The tuner's predicted ranking of matmul configs (`tpu-kernels tune --chips ...`; the op's
`cost=`, `pallas.predicted_seconds`) prices them with this same `seconds`, on the predicted
chip's peaks taken at the shares the v5e's fit found (`Chip.like`), ties them within `TIE`, and
breaks the ties by `preference`, as `choose` does: the default and the prediction are one model
and one rule.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jax import export

from tpu_kernels.kernels import _vmem

# Fitted to bench/reports/chip_v5e_tune.json's matmul rows (see the module docstring).
MXU_RATE = 0.944 * 197e12  # flops per second a step's dot reaches: the fitted share of a v5e's bf16 peak
HBM_BYTES_S = 871e9  # bytes per second a grid step's blocks stream at
ACC_S = 0.267e-12  # seconds per output element per step: the accumulator's read, add and write
STEP_S = 0.235e-6  # seconds per grid step beyond its data, flops and accumulator
FIXED_S = 19e-6  # seconds per call beyond its steps
TIE = 0.03  # candidates priced within this fraction of the least tie: below the fit's resolution (`choose`)
MXU_ROWS = 128  # a v5e's MXU width: fewer rows per step cost a full pass of the array
V5E_PEAK_FLOPS, V5E_HBM_BYTES_S = 197e12, 820e9  # JAX's figures (get_tpu_info_for_chip) for the chip fitted to

BLOCK_CAP = {"m": 2048, "n": 4096, "k": 2048}
"""The largest block each dimension takes by default (the VMEM need caps them further)."""

MIN_BLOCK = 256
"""The narrowest default block, unless the whole dimension is narrower: the widest MXU (v6e,
7x) is 256 wide, and a narrower block only grows the grid."""


@dataclass(frozen=True)
class Chip:
    """The chip figures the model prices with: the v5e's fitted ones (`V5E`), or another
    generation's (`like`)."""

    mxu_rate: float  # flops per second a step's dot reaches
    hbm_bytes_s: float  # bytes per second a step's blocks stream at
    mxu_rows: int  # rows under which a step still pays a full pass of the MXU

    @classmethod
    def like(cls, figures: Any) -> Chip:
        """A chip with `figures`' peaks (`bf16_flops`, `hbm_bytes_per_s`, `mxu_width`: the
        tuner's `ChipFigures`), reached at the shares the v5e's fit found; the per-step,
        accumulator and per-call costs stay the v5e's."""
        return cls(
            MXU_RATE * figures.bf16_flops / V5E_PEAK_FLOPS,
            HBM_BYTES_S * figures.hbm_bytes_per_s / V5E_HBM_BYTES_S,
            int(figures.mxu_width),
        )


V5E = Chip(MXU_RATE, HBM_BYTES_S, MXU_ROWS)


@dataclass(frozen=True)
class Blocks:
    """A matmul's (block_m, block_n, block_k), and what the cost model prices them at."""

    m: int
    n: int
    k: int
    seconds: float


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


def addend_need(bm: int, bn: int, itemsize: int) -> int:
    """VMEM of an addend's double-buffered (bm, bn) block, beside a kernel's own need (the
    residual epilogue: pallas.matmul_add, gated.swiglu_matmul_add)."""
    return 2 * _vmem.padded_rows(bm, itemsize) * _vmem.padded_cols(bn) * itemsize


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def candidates(dim: int, tile: int, cap: int) -> tuple[int, ...]:
    """The default blocks tried along a dimension of `dim` (see the module docstring): multiples
    of `tile`, at least `MIN_BLOCK` unless they are the whole dimension, at most `cap`."""
    if dim <= MIN_BLOCK:
        return (dim,)
    units = _cdiv(dim, tile)
    out = {dim} if dim <= cap else set()  # a block of the whole dimension is legal at any size
    target = MIN_BLOCK
    while target < min(dim, cap + 1):
        out.add(target)
        out.add(tile * _cdiv(units, _cdiv(dim, target)))  # as many blocks, split evenly
        target *= 2
    return tuple(sorted(b for b in out if MIN_BLOCK <= b <= cap or b == dim))


@dataclass(frozen=True)
class Prologue:
    """What a kernel built on matmul's adds to each step before its dot (gated.py: the a tile
    made from two operands): `a_operands` [m, k] blocks streamed per step instead of one, and
    `element_s` seconds of vector work per element of the a tile, which the step's dot waits
    for. Both are paid again for each block along N, so they price a narrow block_n."""

    a_operands: int = 1
    element_s: float = 0.0


PLAIN = Prologue()


def seconds(
    m: int, k: int, n: int, bm: int, bn: int, bk: int, itemsize: int, passes: int = 1, chip: Chip = V5E,
    prologue: Prologue = PLAIN,
) -> float:
    """The cost model's time for a call of a [m, k] @ [k, n] matmul at blocks (bm, bn, bk) on
    `chip` (the v5e's figures unless given), with a kernel's `prologue` (none unless given)."""
    if 0 in (m, k, n):  # an empty call runs no kernel (pallas.matmul)
        return FIXED_S
    gm, gn, gk = _cdiv(m, bm), _cdiv(n, bn), _cdiv(k, bk)
    mxu = 2 * max(bm, chip.mxu_rows) * bn * bk * passes / chip.mxu_rate + prologue.element_s * bm * bk
    block = (prologue.a_operands * bm * bk + bk * bn) * itemsize
    hbm = (block + bm * bn * itemsize / gk) / chip.hbm_bytes_s
    ends = (block + bm * bn * itemsize) / chip.hbm_bytes_s
    acc = ACC_S * max(bm, 8) * bn if gk > 1 else 0.0  # one K step writes its product: no accumulator
    return gm * gn * gk * (max(mxu, hbm) + acc + STEP_S) + ends + FIXED_S


@functools.lru_cache(maxsize=4096)
def choose(
    m: int, k: int, n: int, itemsize: int, passes: int = 1, need: Callable[..., int] | None = None,
    prologue: Prologue = PLAIN,
) -> Blocks:
    """The default blocks of a [m, k] @ [k, n] call whose operands have `itemsize` bytes and whose
    product takes `passes` MXU passes: among the candidates whose VMEM need fits, those the cost
    model prices within `TIE` of the least, and of those the cheapest of one K step (no
    accumulator: at qwen2.5-1.5b's and llama-3.2-1b's FFN up projections such blocks ran faster
    than the wider output blocks of several K steps, and the cheapest of them fastest:
    bench/reports/chip_v5e_layer_pieces.json, `blocks`), else the largest output block (each
    operand is then read fewest times), then the squarest, then the smallest block_k (more K
    steps for the pipeline to hide a tile's first reads and last write behind), then the
    cheapest: the model prices such candidates within a few percent of each other where the
    chip's sweeps (bench/reports/chip_v5e_tune.json) found them apart, so the tie goes to what
    reads each operand fewest times. A decode batch (M under the MXU's rows) has a few rows of
    accumulator to save, and goes by the output block. When no candidate fits (a row too wide),
    the smallest blocks. `need(bm, bn, bk, itemsize, passes)`: a grid step's VMEM, `vmem_need` unless a kernel
    built on this one holds more (gated.py); `prologue`: what such a kernel adds to a step's
    price (`Prologue`)."""
    need = need or vmem_need
    priced = []
    for bm in candidates(m, 128, BLOCK_CAP["m"]):  # (a dimension up to 256 is one whole block)
        for bn in candidates(n, 128, BLOCK_CAP["n"]):
            for bk in candidates(k, 128, BLOCK_CAP["k"]):
                if _vmem.fits(need(bm, bn, bk, itemsize, passes)):
                    priced.append((seconds(m, k, n, bm, bn, bk, itemsize, passes, prologue=prologue), bm, bn, bk))
    if not priced:
        bm, bn, bk = (min(d, MIN_BLOCK) for d in (m, n, k))
        return Blocks(bm, bn, bk, seconds(m, k, n, bm, bn, bk, itemsize, passes, prologue=prologue))
    least = min(p[0] for p in priced)
    t, bm, bn, bk = min((p for p in priced if p[0] <= least * (1 + TIE)),
                        key=lambda p: (*preference(m, k, n, *p[1:]), p[0]))
    return Blocks(bm, bn, bk, t)


def preference(m: int, k: int, n: int, bm: int, bn: int, bk: int) -> tuple:
    """Where blocks (bm, bn, bk) stand among those the cost model ties (`TIE`), least first:
    blocks of one K step (block_k covers K; M at least the MXU's rows), which tie among
    themselves and so go by price; then the largest output block, the squarest, and the
    smallest block_k, each block capped at its dimension (`choose`'s docstring says why). The
    tuner breaks its predicted ties with it too (`pallas.predicted_seconds.prefer`): one rule
    for the default and the prediction."""
    bm, bn, bk = min(bm, m), min(bn, n), min(bk, k)
    if bk == k and m >= MXU_ROWS:  # one K step: no accumulator; the cheapest of them (the price's tiebreak)
        return (0,)
    return 1, -bm * bn, max(bm, bn) / max(1, min(bm, bn)), bk


def default(m: int, k: int, n: int, itemsize: int, passes: int = 1) -> tuple[int, int, int]:
    """(block_m, block_n, block_k) for a call that leaves them unset (`choose`). A symbolic size
    (the fake function under torch.compile(dynamic=True)) takes the largest candidates that fit
    at a large shape: the output's shape does not depend on the blocks."""
    if any(export.is_symbolic_dim(d) for d in (m, k, n)):
        return _large(itemsize, passes)
    if 0 in (m, k, n):  # an empty call computes its result without the kernel
        return m, n, k
    b = choose(m, k, n, itemsize, passes)
    return b.m, b.n, b.k


def _large(itemsize: int, passes: int) -> tuple[int, int, int]:
    b = choose(8192, 8192, 8192, itemsize, passes)
    return b.m, b.n, b.k


__all__ = ["BLOCK_CAP", "PLAIN", "V5E", "Blocks", "Chip", "Prologue", "addend_need", "candidates", "choose", "default", "preference", "seconds",
           "vmem_need"]
