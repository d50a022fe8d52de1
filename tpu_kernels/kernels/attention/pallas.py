"""Attention as Pallas TPU kernels: flash forward (online softmax) and backward, with
grouped kv heads, a causal mask and a sliding window.

q: [batch, heads, seq_q, head_dim]; k, v: [batch, kv_heads, seq_k, head_dim], where
kv_heads divides heads (GQA; MQA at one kv head). The `_by_token` functions take them as
[batch, seq, heads, head_dim] instead (`BY_TOKEN`), the same kernels reading each head in
place. q head h reads kv head h // (heads // kv_heads) through the kernels' index maps: k and v
are never repeated in memory. A query at position i sees the key at j when

    causal=False:  every j;
    causal=True:   j <= i (top-left aligned, as torch's scaled_dot_product_attention);
    window=w:      also i - w < j (w keys including its own; needs causal=True).

Forward, grid (batch, heads, q blocks, kv steps): for one q block the kv blocks it needs
stream past while VMEM scratch holds the running row max m, the running sum l of
exp(s - m) (both lane-dense: each row's value in all 128 lanes, which the broadcasts
against the scores and the accumulator need; (block_q, 1) scratch costs a lane broadcast
per use, bench/reports/chip_v5e_attention_probe.json) and the float32 accumulator of
p @ v. The last step writes out = acc / l and lse = m + log(l), which the backward
uses to recompute p = exp(s - lse).

Backward, from q, k, v, out, lse and d_out, with delta = rowsum(d_out * out):
    p  = exp(q k^T * scale - lse)         dv = p^T d_out
    dp = d_out v^T   ds = p * (dp - delta)
    dq = ds k * scale                      dk = ds^T q * scale
as two kernels accumulating in float32 VMEM along their last ("arbitrary") axis: dK/dV
per kv block over the q blocks of every q head of its group (so a kv head's gradient sums
its group's heads without a second pass), dQ per q block over the kv blocks. Where its VMEM
need fits (`_fused_fits`), one kernel instead: the dK/dV walk also adds each step's ds k into
a float32 dQ of the kv head's whole group and sequence in VMEM (`_dkv_kernel` with
`dq_layout`), five products per block pair where the two kernels take seven, the same bits.

A causal call's grid walks a table of exactly the (q block, kv block) pairs its mask reaches
(`_table`, scalar-prefetched into SMEM; a window's band, or the diagonal's triangle), each step
flagged first, last, or edge. Only edge blocks (the diagonal's, the window's far edge, the
last blocks' overhang) run the masks; blocks wholly inside run without them. A diagonal block
runs in row chunks (`_run`, `Plan.sub`), each reading only the keys up to its last row, so the
keys above the diagonal inside it cost nothing. Without the table
(not causal, or a walk over MAX_STEPS) the grid is the rectangle of (outer block, inner step):
steps past an outer block's last needed block repeat its index (Pallas copies nothing in) and
skip the body. (The table's speed against the rectangle on a v5e:
bench/reports/chip_v5e_attention_walk.json.)

A sequence that no block divides is not padded in memory: the last block of q, k, v and the
outputs runs past the array's end, Pallas reads unspecified values there and writes only the
rows inside it. The kernels make those rows harmless: keys past seq_k are masked out of the
scores, and their k and v rows zeroed before a product could carry them into a real row
(0 x NaN is NaN); queries past seq_q affect only their own rows in the forward and dQ, and in
dK/dV their q and dO rows are zeroed. The per-row arrays (lse, delta: [.., seq, 1], a lane
each) are small and keep whole blocks: lse is written to the blocks' length and sliced, and
the backward pads it with +inf (and delta with 0), so a query past seq_q has p = 0 there.
(Copies of q, k and v padded to the blocks, and of the outputs sliced back, cost 7-12% of a
forward through torch at lengths 512 does not divide:
bench/reports/chip_v5e_attention_torch_probe.json.) Left unset, a block
is the whole sequence up to 1024 (a causal square up to WHOLE at head_dim up to 128: `_whole`),
else 1024, 512, 256 or 128, whichever costs least with the rows its last block runs past, or for
a causal forward the triangle of blocks it walks (`_block`); the diagonal's chunks are 256 rows
where 256 divides the block, else 128 on a single block (`_diagonal`).
"""

from __future__ import annotations

import functools
import math
import operator
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax import export
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from tpu_kernels.kernels import _vmem
from tpu_kernels.kernels._blocks import LANES, SUBLANES, check_aligned, cost, is_empty, lanes, require_float
from tpu_kernels.kernels._config import BlockConfig

KERNEL = "attention"  # error messages start with it
MASK = -0.7 * float(jnp.finfo(jnp.float32).max)  # finite: exp(MASK - m) is 0, never NaN
SEMANTICS = ("parallel", "parallel", "parallel", "arbitrary")
DEFAULT_BLOCKS = (1024, 512, 256, 128)  # tried in order when a block is left unset


@dataclass(frozen=True)
class Config(BlockConfig):
    """attention's blocks (`_config`): block_q query rows and block_k keys per grid step, one
    pair for the forward and the backward kernels."""

    block_q: int | None = None
    block_k: int | None = None
    SPACE = {"block_q": [128, 256, 512, 1024], "block_k": [128, 256, 512, 1024]}

    @classmethod
    def default(cls, q_shape, k_shape, *, causal: bool = False, window: int | None = None,
                backward: bool = False) -> Config:
        """The blocks a call leaving them unset runs its forward (or `backward`) kernels with:
        per sequence, the whole of it up to 1024 (a causal square at head_dim up to 128: up to
        WHOLE, `_whole`), else the block of DEFAULT_BLOCKS that costs least (`_default_block`), a
        causal forward over a square pricing the triangle it walks, and the backward taking a
        wider multiple of 128 where one divides the sequence."""
        seq_q, seq_k = q_shape[2], k_shape[2]
        if _whole(seq_q, seq_k, q_shape[3], causal, window):
            return cls(seq_q, seq_k)
        triangle = _triangle(seq_q, seq_k, causal, window, forward=not backward)
        return cls(_default_block(seq_q, triangle, backward), _default_block(seq_k, triangle, backward))


def _acc(dtype) -> jnp.dtype:
    return jnp.promote_types(dtype, jnp.float32)


def _min(a, b):  # Python ints stay Python ints (the step tables); traced ones go through jnp
    return min(a, b) if isinstance(a, int) and isinstance(b, int) else jnp.minimum(a, b)


def _max(a, b):
    return max(a, b) if isinstance(a, int) and isinstance(b, int) else jnp.maximum(a, b)


@dataclass(frozen=True)
class Plan:
    """One call's static layout: blocks, the lengths the blocks cover, the mask, and what each
    step reads."""

    seq_q: int  # the real lengths: rows past them (the last block's overhang) are unspecified
    seq_k: int
    sq: int  # the lengths the blocks cover: whole blocks, up to one block past the real lengths
    sk: int
    bq: int
    bk: int
    group: int  # q heads per kv head
    causal: bool
    window: int | None
    sub: int = 0  # a diagonal block's row chunk (`_diagonal`); 0: diagonal blocks run whole

    @property
    def nq(self) -> int:
        return self.sq // self.bq

    @property
    def nk(self) -> int:
        return self.sk // self.bk

    @property
    def kv_steps(self) -> int:
        """Inner steps of a q block: every kv block, or as many as its window's band can touch."""
        if self.window is None or export.is_symbolic_dim(self.nk):  # symbolic: shapes only
            return self.nk
        return min(self.nk, -(-(self.bq + self.window - 1) // self.bk) + 1)

    @property
    def q_steps(self) -> int:
        """q blocks a kv block can be seen by (per q head of its group)."""
        if self.window is None or export.is_symbolic_dim(self.nq):
            return self.nq
        return min(self.nq, -(-(self.bk + self.window - 1) // self.bq) + 1)

    @property
    def padded_keys(self) -> bool:
        """The last kv block runs past seq_k: its overhang is masked and its k, v rows zeroed."""
        return self.sk != self.seq_k

    @property
    def ragged_q(self) -> bool:
        """The last q block runs past seq_q: dK/dV zero its overhang's q and dO rows."""
        return self.sq != self.seq_q

    # the kv blocks q block i needs, first to last, and the q blocks kv block j is needed by
    def first_kv(self, i):
        if self.window is None:
            return 0
        return _max(i * self.bq - self.window + 1, 0) // self.bk

    def last_kv(self, i):
        if not self.causal:
            return self.nk - 1
        return _min((i * self.bq + self.bq - 1) // self.bk, self.nk - 1)

    def first_q(self, j):
        return (j * self.bk) // self.bq if self.causal else 0

    def last_q(self, j):
        if self.window is None:
            return self.nq - 1
        return _min((j * self.bk + self.bk + self.window - 2) // self.bq, self.nq - 1)

    def kv_block(self, i, step):
        return _min(self.first_kv(i) + step, self.last_kv(i))

    def q_block(self, j, step):
        return _min(self.first_q(j) + step, self.last_q(j))


# ---- walks: the (outer block, inner block) pairs a kernel's grid visits ------------------------

MAX_STEPS = 1 << 14  # a table's steps, two int32 scalars each in SMEM (a v5e core has 1 MiB): longer walks take the rectangle
FIRST, LAST, EDGE, RUN = 1, 2, 4, 8  # a table step's flags


def _table(plan: Plan, q_major: bool) -> np.ndarray | None:
    """A causal call's walk as a table [2, steps] int32, one column per grid step: (outer block
    << 16 | inner block, member << 4 | flags), in order. q_major (forward, dQ): each q block's kv
    blocks; else (dK/dV) each kv block's q blocks of every q head (member) of its group. Only the
    pairs the mask reaches are steps; a rectangle grid would also step through the blocks past
    the diagonal, about half of them, each costing a step's overhead with nothing to compute.
    (A kv block no query sees gets one step that runs nothing, so its gradient is written as
    zeros.) None: the rectangle (not causal, symbolic lengths, or more than MAX_STEPS)."""
    if not plan.causal or any(export.is_symbolic_dim(n) for n in (plan.sq, plan.sk)):
        return None
    if max(plan.nq, plan.nk) >= 1 << 16:
        return None
    outer_n, members = (plan.nq, 1) if q_major else (plan.nk, plan.group)
    first, last = (plan.first_kv, plan.last_kv) if q_major else (plan.first_q, plan.last_q)
    pairs, extras = [], []
    for o in range(outer_n):
        lo, hi = first(o), last(o)
        if lo > hi:  # dK/dV only: keys past every query
            pairs.append(o << 16 | (plan.nq - 1))
            extras.append(FIRST | LAST)
            continue
        for m in range(members):
            for n in range(lo, hi + 1):
                q_start, k_start = (o * plan.bq, n * plan.bk) if q_major else (n * plan.bq, o * plan.bk)
                flags = RUN | (EDGE if _edge(plan, q_start, k_start, ragged_rows=not q_major) else 0)
                flags |= (FIRST if m == 0 and n == lo else 0) | (LAST if m == members - 1 and n == hi else 0)
                pairs.append(o << 16 | n)
                extras.append(m << 4 | flags)
        if len(pairs) > MAX_STEPS:
            return None
    return np.array([pairs, extras], np.int32)


@dataclass(frozen=True)
class Walk:
    """One kernel's grid past (batch, heads): a table's steps (one axis, its two scalar-prefetch
    rows read by the index maps and the body), or the rectangle (outer blocks, inner steps),
    whose steps past an outer block's last inner block repeat that block and skip the body."""

    plan: Plan
    q_major: bool
    table: np.ndarray | None

    @property
    def grid(self) -> tuple[int, ...]:
        if self.table is not None:
            return (self.table.shape[1],)
        if self.q_major:
            return (self.plan.nq, self.plan.kv_steps)
        return (self.plan.nk, self.plan.group * self.plan.q_steps)

    @property
    def semantics(self) -> tuple[str, ...]:
        return SEMANTICS if self.table is None else (*SEMANTICS[:2], "arbitrary")

    @property
    def prefetch(self) -> tuple[jax.Array, ...]:
        return () if self.table is None else (jnp.asarray(self.table[0]), jnp.asarray(self.table[1]))

    def blocks(self, *ids):
        """(outer block, inner block, member) of the step whose grid ids (and tables) are ids."""
        if self.table is not None:
            p, pairs, extras = ids[2], ids[3], ids[4]
            return pairs[p] >> 16, pairs[p] & 0xFFFF, extras[p] >> 4
        o, t = ids[2], ids[3]
        if self.q_major:
            return o, self.plan.kv_block(o, t), 0
        steps = self.plan.q_steps
        return o, self.plan.q_block(o, t % steps), t // steps

    def step(self, tables):
        """Inside a body: (outer, inner, member, first, last, run, edge) of this step; edge is
        None where no block of the call needs the masks."""
        plan = self.plan
        starts = (
            (lambda o, n: (o * plan.bq, n * plan.bk))
            if self.q_major
            else (lambda o, n: (n * plan.bq, o * plan.bk))
        )
        any_edge = _edge(plan, 0, 0, ragged_rows=not self.q_major) is not None
        if self.table is not None:
            p = pl.program_id(2)
            pairs, extras = tables
            o, n, m, x = pairs[p] >> 16, pairs[p] & 0xFFFF, extras[p] >> 4, extras[p]
            edge = (x & EDGE) != 0 if any_edge else None
            return o, n, m, (x & FIRST) != 0, (x & LAST) != 0, (x & RUN) != 0, edge
        o, t = pl.program_id(2), pl.program_id(3)
        o, n, m = self.blocks(0, 0, o, t)
        s = t if self.q_major else t % plan.q_steps
        run = (plan.first_kv(o) if self.q_major else plan.first_q(o)) + s <= (
            plan.last_kv(o) if self.q_major else plan.last_q(o)
        )
        edge = _edge(plan, *starts(o, n), ragged_rows=not self.q_major)
        return o, n, m, t == 0, t == pl.num_programs(3) - 1, run, edge


def _walk(plan: Plan, q_major: bool) -> Walk:
    return Walk(plan, q_major, _table(plan, q_major))


def _edge(plan: Plan, q_start, k_start, *, ragged_rows: bool = False):
    """Whether the (q block, kv block) starting at these rows needs the masks (a traced bool), or
    None where no block of the call does: a block the causal diagonal or the window's far edge
    crosses, the last kv block where it runs past seq_k, and (ragged_rows, for dK/dV) the last
    q block where it runs past seq_q. The blocks inside the mask, most of a long causal
    sequence's, run a body without the mask's compares and selects on every score."""
    q_last, k_last = q_start + plan.bq - 1, k_start + plan.bk - 1
    crossed = []
    if plan.causal:
        crossed.append(k_last > q_start)
    if plan.window is not None:
        crossed.append(k_start <= q_last - plan.window)
    if plan.padded_keys:
        crossed.append(k_last >= plan.seq_k)
    if ragged_rows and plan.ragged_q:
        crossed.append(q_last >= plan.seq_q)
    return functools.reduce(operator.or_, crossed) if crossed else None


def _when(run, edge, body) -> None:
    """body(masked) where run holds: masked at the blocks `edge` marks, unmasked elsewhere (two
    compiled bodies, one taken per step)."""
    if edge is None:
        pl.when(run)(lambda: body(False))
    else:
        pl.when(run & edge)(lambda: body(True))
        pl.when(run & jnp.logical_not(edge))(lambda: body(False))


def _run(plan: Plan, run, edge, q_block, kv_block, body) -> None:
    """`_when(run, edge, body)`, with a causal diagonal block (`_diagonal`) run in row chunks
    instead: body(True, lo) for the chunk of plan.sub rows from lo, which reads only the keys up
    to its last row (lo + plan.sub of them), so a chunk skips the keys above the diagonal that a
    whole block's masked body computes and throws away. Chunks wholly past seq_q (the last
    block's overhang) are skipped too. A third compiled body, taken at the diagonal's steps."""
    if not plan.sub:
        _when(run, edge, body)
        return
    diagonal = q_block == kv_block

    @pl.when(run & diagonal)
    def _chunks():
        q_start = q_block * plan.bq
        for lo in range(0, plan.bq, plan.sub):
            chunk = functools.partial(body, True, lo)
            if plan.ragged_q:
                pl.when(q_start + lo < plan.seq_q)(chunk)
            else:
                chunk()

    _when(run & jnp.logical_not(diagonal), edge, body)


def _diagonal(seq_q, seq_k, bq: int, bk: int, causal: bool, sub: int | None) -> int:
    """A plan's row chunk for its causal diagonal blocks (`_run`): the `sub` given, or unset
    DIAGONAL_SUB, else (a block it does not divide) SINGLE_SUB where one block covers both
    sequences; 0 (whole blocks) unless causal, with square blocks that the chunk divides into two
    or more (the diagonal's rows and keys start together), at concrete lengths. On a v5e,
    chunks of 256 ran forward + backward no slower than whole diagonal blocks at every draw of
    head_dim 128 and 256, and chunks of 128 slower at head_dim 64 and 128 except where one block
    covers the sequence (bench/reports/chip_v5e_attention_walk.json, `diagonal`)."""
    if not causal or bq != bk or any(export.is_symbolic_dim(n) for n in (seq_q, seq_k, bq)):
        return 0

    def divides(c: int) -> bool:
        return bool(c) and bq % c == 0 and bq // c >= 2

    if sub is not None:
        return sub if divides(sub) else 0
    if divides(DIAGONAL_SUB):
        return DIAGONAL_SUB
    return SINGLE_SUB if bq >= max(seq_q, seq_k) and divides(SINGLE_SUB) else 0


def _scaled(q, scale: float):
    """The q block times the softmax scale, in q's dtype: a (block_q, head_dim) product per step
    where scaling the scores took a (block_q, block_k) one (on a v5e: faster at head_dim 256,
    unchanged at 128; bench/reports/chip_v5e_attention_walk.json). One rounding of q more in
    bf16 (none where the scale is a power of two, as at head_dim 64 and 256); the forward's lse
    and the backward's scores round alike."""
    if scale == 1.0:
        return q
    return (q.astype(_acc(q.dtype)) * scale).astype(q.dtype)


def _scores(q, k, plan: Plan, q_start, k_start, masked: bool):
    """s = q k^T for one (q block, scaled already: `_scaled`; kv block); masked (an edge
    block): -inf-like where a query may not see a key."""
    s = jax.lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=_acc(q.dtype))
    if masked and (plan.causal or plan.padded_keys):
        rows = q_start + jax.lax.broadcasted_iota(jnp.int32, s.shape, 0)
        cols = k_start + jax.lax.broadcasted_iota(jnp.int32, s.shape, 1)
        seen = None
        if plan.causal:
            seen = cols <= rows
        if plan.window is not None:
            seen = seen & (cols > rows - plan.window)
        if plan.padded_keys:
            real = cols < plan.seq_k
            seen = real if seen is None else seen & real
        s = jnp.where(seen, s, MASK)
    return s


def _real_rows(x, start: int, length: int):
    """x (a block starting at row `start` of an array `length` rows long) with the rows past
    the array's end zeroed: Pallas leaves them unspecified (NaN in the interpreter)."""
    rows = start + jax.lax.broadcasted_iota(jnp.int32, x.shape, 0)
    return jnp.where(rows < length, x, jnp.zeros_like(x))


def _chunk(plan: Plan, lo: int | None) -> tuple[slice, int]:
    """(the rows of a block a body step reads, the keys it reads): the whole block, or (lo, a
    diagonal block's row chunk: `_run`) plan.sub rows from lo and the lo + plan.sub keys up to
    the chunk's last row."""
    if lo is None:
        return slice(None), plan.bk
    return slice(lo, lo + plan.sub), lo + plan.sub


def _fwd_kernel(*refs, scale, walk: Walk):
    """refs: the walk's tables (if any), q, k, v, out, (lse, without it for `attention_out`),
    and the scratch m, l, acc."""
    tables, refs = (refs[:2], refs[2:]) if walk.table is not None else (None, refs)
    q_ref, k_ref, v_ref, o_ref, *lse_ref, m_sc, l_sc, acc_sc = refs
    plan = walk.plan
    block_k, d = k_ref.shape[0], acc_sc.shape[1]
    i, j, _, first, last, run, edge = walk.step(tables)
    k_start = j * block_k

    @pl.when(first)
    def _init():
        m_sc[...] = jnp.full_like(m_sc, -jnp.inf)
        l_sc[...] = jnp.zeros_like(l_sc)
        acc_sc[...] = jnp.zeros_like(acc_sc)

    def _step(masked: bool, lo: int | None = None):  # lo: a diagonal block's row chunk (`_run`)
        rows, width = _chunk(plan, lo)
        s = _scores(_scaled(q_ref[rows, :], scale), k_ref[:width, :], plan, i * plan.bq + (lo or 0), k_start, masked)
        m_prev = m_sc[rows, :]
        m_new = jnp.maximum(m_prev, jnp.max(s, axis=-1, keepdims=True))
        rescale = jnp.exp(m_prev - m_new)  # 0 at the first block (m_prev = -inf)
        p = jnp.exp(s - lanes(m_new, width))
        l_sc[rows, :] = rescale * l_sc[rows, :] + jnp.sum(p, axis=-1, keepdims=True)
        v = v_ref[:width, :]
        v = _real_rows(v, k_start, plan.seq_k) if masked and plan.padded_keys else v
        pv = jnp.dot(p.astype(v.dtype), v, preferred_element_type=acc_sc.dtype)
        acc_sc[rows, :] = lanes(rescale, d) * acc_sc[rows, :] + pv
        m_sc[rows, :] = m_new

    _run(plan, run, edge, i, j, _step)

    @pl.when(last)
    def _finish():
        total = l_sc[...]
        o_ref[...] = (acc_sc[...] / lanes(total, d)).astype(o_ref.dtype)
        for r in lse_ref:
            r[...] = (m_sc[...] + jnp.log(total))[:, :1].astype(r.dtype)


def _dkv_kernel(*refs, scale, walk: Walk, dq_layout: str | None = None):
    """One kv block accumulating over its group's q heads and their q blocks. With `dq_layout`
    (the fused backward, `_fused_fits`), each step's ds also gives its q block's share of dQ,
    ds k, added into a float32 VMEM accumulator holding every q head of the kv head's group over
    the whole sequence, written once after the walk's last step in that layout: five products
    per block pair where the two kernels take seven (the scores and dp once, not twice)."""
    tables, refs = (refs[:2], refs[2:]) if walk.table is not None else (None, refs)
    fused = dq_layout is not None
    if fused:
        q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, dk_ref, dv_ref, dq_ref, dk_sc, dv_sc, dq_sc = refs
    else:
        q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, dk_ref, dv_ref, dk_sc, dv_sc = refs
    plan = walk.plan
    j, i, member, first, last, run, edge = walk.step(tables)
    q_start, k_start = i * plan.bq, j * plan.bk
    if fused:  # the walk's first and last steps (dQ spans every kv block of the kv head)
        if walk.table is not None:
            ends = pl.program_id(2) == 0, pl.program_id(2) == pl.num_programs(2) - 1
        else:
            ids, sizes = (pl.program_id(2), pl.program_id(3)), (pl.num_programs(2), pl.num_programs(3))
            ends = (ids[0] == 0) & (ids[1] == 0), (ids[0] == sizes[0] - 1) & (ids[1] == sizes[1] - 1)

        @pl.when(ends[0])
        def _init_dq():
            dq_sc[...] = jnp.zeros_like(dq_sc)

    @pl.when(first)
    def _init():
        dk_sc[...] = jnp.zeros_like(dk_sc)
        dv_sc[...] = jnp.zeros_like(dv_sc)

    def _step(masked: bool, lo: int | None = None):  # lo: a diagonal block's row chunk (`_run`)
        rows, width = _chunk(plan, lo)
        start = q_start + (lo or 0)
        q, k, v, do = q_ref[rows, :], k_ref[:width, :], v_ref[:width, :], do_ref[rows, :]
        acc = dk_sc.dtype
        if masked and plan.ragged_q:  # queries past seq_q: zero q and dO, and lse +inf (p = 0, ds = 0)
            q, do = _real_rows(q, start, plan.seq_q), _real_rows(do, start, plan.seq_q)
        # keys past seq_k: their dp (and ds) columns may be NaN, which reach only their own dK
        # rows (never written), but also dQ where it is fused: there zero their k and v rows
        if fused and masked and plan.padded_keys:
            k, v = _real_rows(k, k_start, plan.seq_k), _real_rows(v, k_start, plan.seq_k)
        s = _scores(_scaled(q, scale), k, plan, start, k_start, masked)
        p = jnp.exp(s - lse_ref[rows, :])  # (rows, keys); masked entries give 0
        transposed_lhs = (((0,), (0,)), ((), ()))  # p^T @ x without materialising p^T
        dv_sc[:width, :] += jax.lax.dot_general(p.astype(do.dtype), do, transposed_lhs, preferred_element_type=acc)
        dp = jax.lax.dot_general(do, v, (((1,), (1,)), ((), ())), preferred_element_type=acc)
        ds = (p * (dp - delta_ref[rows, :])).astype(q.dtype)
        dk_sc[:width, :] += jax.lax.dot_general(ds, q, transposed_lhs, preferred_element_type=acc)
        if fused:
            n = plan.bq if lo is None else plan.sub
            dq_rows = pl.ds(pl.multiple_of(start, n), n)
            dq_sc[member, dq_rows, :] += jnp.dot(ds, k, preferred_element_type=acc)

    _run(plan, run, edge, i, j, _step)

    @pl.when(last)
    def _finish():
        dk_ref[...] = (dk_sc[...] * scale).astype(dk_ref.dtype)
        dv_ref[...] = dv_sc[...].astype(dv_ref.dtype)

    if fused:

        @pl.when(ends[1])
        def _finish_dq():
            d = dq_sc.shape[2]
            for m in range(plan.group):
                dq = (dq_sc[m, : plan.seq_q, :] * scale).astype(dq_ref.dtype)
                if dq_layout == BY_HEAD:
                    dq_ref[m] = dq
                else:
                    dq_ref[:, m * d : (m + 1) * d] = dq


def _dq_kernel(*refs, scale, walk: Walk):
    """One q block accumulating over the kv blocks it needs."""
    tables, refs = (refs[:2], refs[2:]) if walk.table is not None else (None, refs)
    q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, dq_ref, dq_sc = refs
    plan = walk.plan
    i, j, _, first, last, run, edge = walk.step(tables)
    k_start = j * plan.bk

    @pl.when(first)
    def _init():
        dq_sc[...] = jnp.zeros_like(dq_sc)

    def _step(masked: bool, lo: int | None = None):  # lo: a diagonal block's row chunk (`_run`)
        rows, width = _chunk(plan, lo)
        q, k, v, do = q_ref[rows, :], k_ref[:width, :], v_ref[:width, :], do_ref[rows, :]
        acc = dq_sc.dtype
        if masked and plan.padded_keys:  # keys past seq_k: p is 0 there, and zero k, v keep ds and dq finite
            k, v = _real_rows(k, k_start, plan.seq_k), _real_rows(v, k_start, plan.seq_k)
        s = _scores(_scaled(q, scale), k, plan, i * plan.bq + (lo or 0), k_start, masked)
        p = jnp.exp(s - lse_ref[rows, :])
        dp = jax.lax.dot_general(do, v, (((1,), (1,)), ((), ())), preferred_element_type=acc)
        ds = p * (dp - delta_ref[rows, :])
        dq_sc[rows, :] += jnp.dot(ds.astype(k.dtype), k, preferred_element_type=acc)

    _run(plan, run, edge, i, j, _step)

    @pl.when(last)
    def _finish():
        dq_ref[...] = (dq_sc[...] * scale).astype(dq_ref.dtype)


# ---- blocks and checks -------------------------------------------------------------------


# Seconds per covered position, relative to 1024-blocks, of the blocks a default may take: on a
# v5e a causal forward at 256-blocks ran 2-3x and at 128-blocks ~8x slower per flop than at 512
# or 1024 (bench/reports/chip_v5e_attention_family.json, the first run's points at lengths that
# only 256 or 128 divide), so a default runs a length in 512- or 1024-blocks, the last one past
# its end, rather than take a small block that divides it. A causal forward walks only the
# blocks on and below the diagonal (`_table`), so its cost is the triangle of blocks it covers,
# where smaller blocks waste less of the diagonal: there the forward takes the least triangle x
# BLOCK_COST (at 9472 tokens 512-blocks ran the forward faster than the 1024-blocks the covered
# length picks: bench/reports/chip_v5e_attention_walk.json). The backward ran slower at 512 there,
# so it keeps the covered length.
BLOCK_COST = {1024: 1.0, 512: 1.06, 256: 2.5, 128: 8.0}
DIAGONAL_SUB = 256  # a causal diagonal block's row chunk (`_run`, `_diagonal`); 0: whole blocks
SINGLE_SUB = 128  # the chunk of a block 256 does not divide, where that one block covers the sequence
WHOLE = 1536  # a causal square up to this long, in 128s, at head_dim up to 128, runs as one block (`_whole`)


def _block(what: str, seq, block: int | None, multiple: int, default: int) -> tuple[int, int]:
    """(block, the length its blocks cover) along a sequence: the block given (checked), or
    unset the `default` (`Config.default`); a block past the sequence is the whole sequence.
    Symbolic lengths (torch.compile's dynamic shapes: the fake traces shapes only) take the
    block unpadded."""
    if block is not None:
        check_aligned(f"{KERNEL}: {what}", block, multiple)
    else:
        block = default
    if export.is_symbolic_dim(seq):
        return block, seq
    return (seq, seq) if seq <= block else (block, -(-seq // block) * block)


def _triangle(seq_q, seq_k, causal: bool, window: int | None, *, forward: bool) -> bool:
    """Whether a call's default blocks price the triangle they walk: a causal forward over one
    square of queries and keys, with no window."""
    return forward and causal and window is None and not export.is_symbolic_dim(seq_q) and seq_q == seq_k


def _whole(seq_q, seq_k, d, causal: bool, window: int | None) -> bool:
    """Whether a call's default is one block over the whole sequence past DEFAULT_BLOCKS[0]: a
    causal square without a window, up to WHOLE tokens, in 128s, at head_dim up to 128. Its
    diagonal in chunks (`_diagonal`) walks about the causal triangle alone, in one step per head
    where 512-blocks take six or more. On a v5e it ran forward + backward faster than the
    blocks below at every length the chip tried up to WHOLE, at head_dim 64 and 128; at head_dim
    256 its backward ran slower (bench/reports/chip_v5e_attention_walk.json, `diagonal`)."""
    if not causal or window is not None or any(export.is_symbolic_dim(n) for n in (seq_q, seq_k, d)):
        return False
    return seq_q == seq_k and DEFAULT_BLOCKS[0] < seq_q <= WHOLE and seq_q % LANES == 0 and d <= LANES


def _default_block(seq, triangle: bool = False, backward: bool = False) -> int:
    """A block left unset: the whole sequence up to 1024 (one block needs no tiling), else the
    block of DEFAULT_BLOCKS with the least covered length x BLOCK_COST, or with `triangle` (a
    causal forward) the least area of the blocks on and below the diagonal x BLOCK_COST; a
    symbolic length, the first of DEFAULT_BLOCKS. The `backward`'s block is instead the widest
    multiple of 128 up to 1024 that divides the sequence, where that is wider (640 of 2560, 896
    of 3584: its kernels ran faster there, in both dtypes, than at 512, and the forward slower:
    bench/reports/chip_v5e_blocks_probe.json, `template`)."""
    if export.is_symbolic_dim(seq):
        return DEFAULT_BLOCKS[0]
    if seq <= DEFAULT_BLOCKS[0]:
        return seq

    def price(b: int) -> float:
        n = -(-seq // b)
        return (n * (n + 1) // 2 * b * b if triangle else n * b) * BLOCK_COST[b]

    block = min(DEFAULT_BLOCKS, key=lambda b: (price(b), -b))
    if backward:
        widest = next((b for b in range(DEFAULT_BLOCKS[0], LANES - 1, -LANES) if seq % b == 0), block)
        block = max(block, widest)
    return block


def _check(q: jax.Array, k: jax.Array, v: jax.Array, causal: bool, window: int | None) -> None:
    if q.ndim != 4 or k.ndim != 4 or k.shape != v.shape:
        raise ValueError(
            f"{KERNEL}: expected q [batch, heads, seq_q, head_dim] and k, v [batch, kv_heads, seq_k, "
            f"head_dim] of one shape, got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}."
        )
    if q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
        raise ValueError(f"{KERNEL}: q {tuple(q.shape)} and k {tuple(k.shape)} differ in batch or head_dim.")
    h, hk = q.shape[1], k.shape[1]
    if not any(export.is_symbolic_dim(n) for n in (h, hk)) and (hk == 0 or h % hk):
        raise ValueError(
            f"{KERNEL}: k and v have {hk} heads, which must divide q's {h} (grouped-query attention)."
        )
    if not q.dtype == k.dtype == v.dtype:  # as torch's scaled_dot_product_attention
        raise ValueError(f"{KERNEL}: q, k and v must have one dtype, got {q.dtype}, {k.dtype} and {v.dtype}.")
    if window is not None:
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError(f"{KERNEL}: window must be a positive int (keys a query sees), got {window!r}.")
        if not causal:
            raise ValueError(
                f"{KERNEL}: window={window} needs causal=True (it bounds how far back a query sees)."
            )
        sq, sk = q.shape[2], k.shape[2]
        if not any(export.is_symbolic_dim(n) for n in (sq, sk)) and sq > sk:
            raise ValueError(
                f"{KERNEL}: window needs seq_q <= seq_k (got {sq} and {sk}): later queries would see no key."
            )


def _scale(q: jax.Array, scale: float | None) -> float:
    if scale is not None:
        return scale
    d = q.shape[-1]
    return 1.0 if export.is_symbolic_dim(d) or d == 0 else 1.0 / math.sqrt(d)  # symbolic: shapes only


def _plan(q, k, causal, window, block_q, block_k, *, forward: bool, sub: int | None = None) -> Plan:
    seq_q, seq_k = q.shape[2], k.shape[2]
    default = Config.default(q.shape, k.shape, causal=causal, window=window, backward=not forward)
    bq, sq = _block("block_q", seq_q, block_q, SUBLANES, default.block_q)
    bk, sk = _block("block_k", seq_k, block_k, LANES, default.block_k)
    group = 1 if export.is_symbolic_dim(q.shape[1]) else q.shape[1] // k.shape[1]
    sub = _diagonal(seq_q, seq_k, bq, bk, causal, sub)
    return Plan(q.shape[2], k.shape[2], sq, sk, bq, bk, group, causal, window, sub)


def _params_need(plan: Plan, d: int, itemsize: int) -> int:
    """A kernel's VMEM need: six q- or kv-shaped blocks double-buffered, the float32 scratch, and
    about four (block_q, block_k) float32 temporaries of the body (scores, probabilities, their
    masks and products)."""
    lanes = -(-d // LANES) * LANES
    need = 12 * max(plan.bq, plan.bk) * lanes * itemsize + 3 * plan.bq * lanes * 4
    rows = plan.sub if plan.sub and plan.nq == plan.nk == 1 else plan.bq  # one block: the diagonal's chunks alone
    return need + 4 * rows * (-(-plan.bk // LANES) * LANES) * 4


def _params(walk: Walk, d: int, itemsize: int) -> pltpu.CompilerParams:
    """The grid's semantics, and a raised scoped VMEM limit when the blocks need one
    (`_params_need`)."""
    return _vmem.compiler_params(walk.semantics, _params_need(walk.plan, d, itemsize))


def _dense(q, k, v, scale, causal, window):
    """Attention in plain JAX, for zero-size inputs: what the torch reference gives (an empty
    key sequence: zero output and a log-sum-exp of -inf)."""
    from tpu_kernels.kernels.attention.jax_reference import attention_jax

    return attention_jax(q, k, v, causal=causal, scale=scale, window=window)


# ---- the op's two functions ---------------------------------------------------------------


def _pad(x: jax.Array, length, value: float) -> jax.Array:
    """A per-row array [batch, heads, seq, 1] padded along its sequence axis to `length`."""
    extra = length - x.shape[2]
    if export.is_symbolic_dim(extra) or extra == 0:
        return x
    return jnp.pad(x, [(0, 0), (0, 0), (0, extra), (0, 0)], constant_values=value)


BY_HEAD, BY_TOKEN = "bhsd", "bshd"
"""The layouts of q, k, v and out: [batch, heads, seq, head_dim] (torch's
scaled_dot_product_attention's), or [batch, seq, heads, head_dim], the layout a projection
writes ([tokens, heads * head_dim] reshaped, no copy). By token, a block of one head's rows is a
(rows, head_dim) window of [batch, seq, heads * head_dim] at lane offset head * head_dim: the
index maps read the heads in place, so a layer needs no transpose around attention. It needs
head_dim a multiple of 128 (a lane-aligned window)."""


def _as_heads(x, layout: str):
    """x's shape and dtype as [batch, heads, seq, head_dim], for the checks and the plan."""
    if layout == BY_HEAD:
        return x
    b, s, h, d = x.shape
    return jax.ShapeDtypeStruct((b, h, s, d), x.dtype)


def _spec(layout: str, rows, d, where):
    """A block of one head's `rows` rows, at `where(*grid ids)` = (batch, head, row block)."""
    if layout == BY_HEAD:
        return pl.BlockSpec((None, None, rows, d), lambda *ids: (*where(*ids), 0))

    def index(*ids):
        b, head, block = where(*ids)
        return b, block, head

    return pl.BlockSpec((None, rows, d), index)


def _flat(x, layout: str):
    """x as the kernels read it: [batch, seq, heads * head_dim] by token (a reshape, no copy)."""
    return x if layout == BY_HEAD else x.reshape(x.shape[0], x.shape[1], -1)


def _check_layout(q, k, v, layout: str) -> None:
    if layout not in (BY_HEAD, BY_TOKEN):
        raise ValueError(f"{KERNEL}: layout must be {BY_HEAD!r} or {BY_TOKEN!r}, got {layout!r}.")
    if layout == BY_TOKEN:
        if q.ndim != 4 or k.ndim != 4 or k.shape != v.shape:
            raise ValueError(
                f"{KERNEL}: expected q [batch, seq_q, heads, head_dim] and k, v [batch, seq_k, kv_heads, "
                f"head_dim] of one shape, got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}."
            )
        d = q.shape[3]
        if not export.is_symbolic_dim(d) and d % LANES:
            raise ValueError(
                f"{KERNEL}: layout {BY_TOKEN!r} reads each head's {d} lanes in place, which needs head_dim a "
                f"multiple of {LANES}; pass [batch, heads, seq, head_dim] ({BY_HEAD!r}) instead."
            )


def _forward(q, k, v, causal, scale, window, block_q, block_k, with_lse: bool, layout: str = BY_HEAD,
             sub: int | None = None):
    """sub: the diagonal blocks' row chunk (`_diagonal`), None for the default."""
    require_float(KERNEL, q=q, k=k, v=v)
    _check_layout(q, k, v, layout)
    qh, kh = _as_heads(q, layout), _as_heads(k, layout)
    _check(qh, kh, _as_heads(v, layout), causal, window)
    if is_empty(q, k, v):
        if layout == BY_TOKEN:
            to_heads = functools.partial(jnp.swapaxes, axis1=1, axis2=2)
            out, lse = _dense(*map(to_heads, (q, k, v)), _scale(q, scale), causal, window)
            out = to_heads(out)
        else:
            out, lse = _dense(q, k, v, _scale(q, scale), causal, window)
        return (out, lse) if with_lse else (out,)
    b, h, seq_q, d = qh.shape
    plan = _plan(qh, kh, causal, window, block_q, block_k, forward=True, sub=sub)
    walk = _walk(plan, q_major=True)
    acc = _acc(q.dtype)
    q_spec = _spec(layout, plan.bq, d, lambda *ids: (ids[0], ids[1], walk.blocks(*ids)[0]))
    kv_spec = _spec(layout, plan.bk, d, lambda *ids: (ids[0], ids[1] // plan.group, walk.blocks(*ids)[1]))
    row_spec = pl.BlockSpec((None, None, plan.bq, 1), lambda *ids: (ids[0], ids[1], walk.blocks(*ids)[0], 0))
    itemsize = jnp.dtype(q.dtype).itemsize
    out_shape, out_specs = [jax.ShapeDtypeStruct(_flat(q, layout).shape, q.dtype)], [q_spec]
    if with_lse:  # whole blocks (a lane per row): sliced below, a few KiB
        out_shape.append(jax.ShapeDtypeStruct((b, h, plan.sq, 1), acc))
        out_specs.append(row_spec)
    outs = pl.pallas_call(
        functools.partial(_fwd_kernel, scale=_scale(q, scale), walk=walk),
        out_shape=tuple(out_shape),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=len(walk.prefetch),
            grid=(b, h, *walk.grid),
            in_specs=[q_spec, kv_spec, kv_spec],
            out_specs=tuple(out_specs),
            scratch_shapes=[
                pltpu.VMEM((plan.bq, LANES), acc),
                pltpu.VMEM((plan.bq, LANES), acc),
                pltpu.VMEM((plan.bq, d), acc),
            ],
        ),
        compiler_params=_params(walk, d, itemsize),
        cost_estimate=cost(
            4 * b * h * plan.sq * plan.sk * d, b * h * plan.sq * plan.sk, (2 * qh.size + 2 * kh.size) * itemsize
        ),
    )(*walk.prefetch, *(_flat(x, layout) for x in (q, k, v)))
    out = outs[0].reshape(q.shape)
    return (out, outs[1][:, :, :seq_q, 0]) if with_lse else (out,)


def attention(
    q: jax.Array,  # [batch, heads, seq_q, head_dim]
    k: jax.Array,  # [batch, kv_heads, seq_k, head_dim]
    v: jax.Array,  # [batch, kv_heads, seq_k, head_dim]
    *,
    causal: bool = False,
    scale: float | None = None,  # default 1 / sqrt(head_dim)
    window: int | None = None,
    block_q: int | None = None,
    block_k: int | None = None,
) -> tuple[jax.Array, jax.Array]:
    """-> (out [batch, heads, seq_q, head_dim], lse [batch, heads, seq_q] float32)."""
    return _forward(q, k, v, causal, scale, window, block_q, block_k, True)


def attention_out(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    causal: bool = False,
    scale: float | None = None,
    window: int | None = None,
    block_q: int | None = None,
    block_k: int | None = None,
) -> jax.Array:
    """-> out alone: the same kernel without the log-sum-exp output, the op's `visible_kernel`,
    which a TPU call needing no gradient runs (each output buffer a call returns costs host
    time through torch_tpu: bench/reports/torch_tpu_outputs_v5e.json)."""
    return _forward(q, k, v, causal, scale, window, block_q, block_k, False)[0]


def attention_backward(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    out: jax.Array,
    lse: jax.Array,  # the forward's residual
    grad_out: jax.Array,
    *,
    causal: bool = False,
    scale: float | None = None,
    window: int | None = None,
    block_q: int | None = None,
    block_k: int | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """-> (dq, dk, dv)."""
    return _backward(q, k, v, out, lse, grad_out, causal, scale, window, block_q, block_k, BY_HEAD)


def _fused_bytes(plan: Plan, d: int, itemsize: int) -> int:
    """VMEM the fused backward's dQ takes beside the dK/dV kernel's own (`_params_need`): a kv
    head's group of q heads over the whole sequence, its float32 accumulator and its output
    block, double-buffered."""
    cols = _vmem.padded_cols(d)
    return plan.group * cols * (plan.sq * 4 + 2 * _vmem.padded_rows(plan.seq_q, itemsize) * itemsize)


def _fused_fits(plan: Plan, d: int, itemsize: int) -> bool:
    """Whether a backward left to its default fuses dQ into the dK/dV kernel: where the fused
    kernel's whole VMEM need `fits` (concrete lengths only). On a v5e the fused backward ran
    forward + backward faster than the two kernels wherever the sequence ran in three blocks or
    more, up to 4352 tokens, and no slower at two; it compiled at more dQ than this rule allows
    (bench/reports/chip_v5e_attention_walk.json, `fused`)."""
    if any(export.is_symbolic_dim(n) for n in (plan.sq, plan.seq_q, d, plan.group)):
        return False
    return _vmem.fits(_params_need(plan, d, itemsize) + _fused_bytes(plan, d, itemsize))


def _backward_fused(plan, walk, layout, sm_scale, specs, q, k, v, do, lse, delta, q_shape, kv_shape, hk):
    """dQ, dK and dV from one kernel (`_dkv_kernel` with `dq_layout`) on the dK/dV walk, over k's
    hk heads."""
    q_spec, kv_spec, row_spec = specs
    b, d = kv_shape[0], kv_shape[-1]
    if layout == BY_HEAD:
        dq_spec = pl.BlockSpec((None, plan.group, plan.seq_q, d), lambda *ids: (ids[0], ids[1], 0, 0))
    else:
        dq_spec = pl.BlockSpec((None, plan.seq_q, plan.group * d), lambda *ids: (ids[0], 0, ids[1]))
    acc, itemsize = _acc(q.dtype), jnp.dtype(q.dtype).itemsize
    need = _params_need(plan, d, itemsize) + _fused_bytes(plan, d, itemsize)
    dk, dv, dq = pl.pallas_call(
        functools.partial(_dkv_kernel, scale=sm_scale, walk=walk, dq_layout=layout),
        out_shape=(
            jax.ShapeDtypeStruct(k.shape, k.dtype),
            jax.ShapeDtypeStruct(v.shape, v.dtype),
            jax.ShapeDtypeStruct(q.shape, q.dtype),
        ),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=len(walk.prefetch),
            grid=(b, hk, *walk.grid),
            in_specs=[q_spec, kv_spec, kv_spec, q_spec, row_spec, row_spec],
            out_specs=(kv_spec, kv_spec, dq_spec),
            scratch_shapes=[
                pltpu.VMEM((plan.bk, d), acc),
                pltpu.VMEM((plan.bk, d), acc),
                pltpu.VMEM((plan.group, plan.sq, d), acc),
            ],
        ),
        compiler_params=_vmem.compiler_params(_fused_semantics(walk), need),
    )(*walk.prefetch, q, k, v, do, lse, delta)
    return dq.reshape(q_shape), dk.reshape(kv_shape), dv.reshape(kv_shape)


def _fused_semantics(walk: Walk) -> tuple[str, ...]:
    """The dK/dV walk's semantics with its kv-block axis "arbitrary" too: dQ accumulates across
    it (each kv head's walk runs in order on one core)."""
    return (*SEMANTICS[:2], *("arbitrary",) * len(walk.grid))


def _backward(q, k, v, out, lse, grad_out, causal, scale, window, block_q, block_k, layout: str,
              fused: bool | None = None, sub: int | None = None):
    """fused: dQ in the dK/dV kernel (`_dkv_kernel` with `dq_layout`); None, where that kernel's
    VMEM need fits (`_fused_fits`). sub: the diagonal blocks' row chunk (`_diagonal`), None for
    the default."""
    sm_scale = _scale(q, scale)
    if is_empty(q, k, v):
        if layout == BY_TOKEN:
            to_heads = functools.partial(jnp.swapaxes, axis1=1, axis2=2)
            grads = _backward(*map(to_heads, (q, k, v, out)), lse, to_heads(grad_out), causal, scale, window,
                              block_q, block_k, BY_HEAD)
            return tuple(map(to_heads, grads))
        _, vjp = jax.vjp(lambda q, k, v: _dense(q, k, v, sm_scale, causal, window)[0], q, k, v)
        return vjp(grad_out.astype(q.dtype))
    qh, kh = _as_heads(q, layout), _as_heads(k, layout)
    b, h, seq_q, d = qh.shape
    hk = kh.shape[1]
    plan = _plan(qh, kh, causal, window, block_q, block_k, forward=False, sub=sub)
    acc = _acc(q.dtype)
    do = grad_out.astype(q.dtype)
    delta = jnp.sum(do.astype(acc) * out.astype(acc), axis=-1, keepdims=True)  # [b, h, seq_q, 1] or [b, seq_q, h, 1]
    if layout == BY_TOKEN:
        delta = jnp.swapaxes(delta, 1, 2)  # a lane per row: small
    # the per-row arrays in whole blocks: queries past seq_q get lse +inf (p = 0) and delta 0
    lse, delta = _pad(lse[..., None].astype(acc), plan.sq, jnp.inf), _pad(delta, plan.sq, 0.0)
    itemsize = jnp.dtype(q.dtype).itemsize
    walk = _walk(plan, q_major=False)
    if fused is None:
        fused = _fused_fits(plan, d, itemsize)

    def q_of_kv(*ids):  # the dK/dV grid walks its group's heads, then their q blocks
        j, i, member = walk.blocks(*ids)
        return (ids[0], ids[1] * plan.group + member, i)

    q_spec = _spec(layout, plan.bq, d, q_of_kv)
    row_spec = pl.BlockSpec((None, None, plan.bq, 1), lambda *ids: (*q_of_kv(*ids), 0))
    kv_spec = _spec(layout, plan.bk, d, lambda *ids: (ids[0], ids[1], walk.blocks(*ids)[0]))
    kv_shape = k.shape
    q, k, v, do = (_flat(x, layout) for x in (q, k, v, do))
    if fused:
        return _backward_fused(plan, walk, layout, sm_scale, (q_spec, kv_spec, row_spec), q, k, v, do, lse, delta,
                               grad_out.shape, kv_shape, hk)
    dk, dv = pl.pallas_call(
        functools.partial(_dkv_kernel, scale=sm_scale, walk=walk),
        out_shape=(
            jax.ShapeDtypeStruct(k.shape, k.dtype),
            jax.ShapeDtypeStruct(v.shape, v.dtype),
        ),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=len(walk.prefetch),
            grid=(b, hk, *walk.grid),
            in_specs=[q_spec, kv_spec, kv_spec, q_spec, row_spec, row_spec],
            out_specs=(kv_spec, kv_spec),
            scratch_shapes=[pltpu.VMEM((plan.bk, d), acc), pltpu.VMEM((plan.bk, d), acc)],
        ),
        compiler_params=_params(walk, d, itemsize),
    )(*walk.prefetch, q, k, v, do, lse, delta)

    walk = _walk(plan, q_major=True)
    q_spec = _spec(layout, plan.bq, d, lambda *ids: (ids[0], ids[1], walk.blocks(*ids)[0]))
    row_spec = pl.BlockSpec((None, None, plan.bq, 1), lambda *ids: (ids[0], ids[1], walk.blocks(*ids)[0], 0))
    kv_spec = _spec(layout, plan.bk, d, lambda *ids: (ids[0], ids[1] // plan.group, walk.blocks(*ids)[1]))
    dq = pl.pallas_call(
        functools.partial(_dq_kernel, scale=sm_scale, walk=walk),
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=len(walk.prefetch),
            grid=(b, h, *walk.grid),
            in_specs=[q_spec, kv_spec, kv_spec, q_spec, row_spec, row_spec],
            out_specs=q_spec,
            scratch_shapes=[pltpu.VMEM((plan.bq, d), acc)],
        ),
        compiler_params=_params(walk, d, itemsize),
    )(*walk.prefetch, q, k, v, do, lse, delta)
    return dq.reshape(grad_out.shape), dk.reshape(kv_shape), dv.reshape(kv_shape)


def attention_by_token(q, k, v, *, causal: bool = False, scale: float | None = None, window: int | None = None,
                       block_q: int | None = None, block_k: int | None = None) -> tuple[jax.Array, jax.Array]:
    """`attention` with q [batch, seq_q, heads, head_dim] and k, v [batch, seq_k, kv_heads,
    head_dim] (`BY_TOKEN`: each head read in place; head_dim a multiple of 128) -> (out [batch,
    seq_q, heads, head_dim], lse [batch, heads, seq_q] float32). The same kernels and blocks."""
    return _forward(q, k, v, causal, scale, window, block_q, block_k, True, BY_TOKEN)


def attention_out_by_token(q, k, v, *, causal: bool = False, scale: float | None = None,
                           window: int | None = None, block_q: int | None = None,
                           block_k: int | None = None) -> jax.Array:
    """`attention_out` by token: out alone."""
    return _forward(q, k, v, causal, scale, window, block_q, block_k, False, BY_TOKEN)[0]


def attention_backward_by_token(q, k, v, out, lse, grad_out, *, causal: bool = False, scale: float | None = None,
                                window: int | None = None, block_q: int | None = None,
                                block_k: int | None = None) -> tuple[jax.Array, jax.Array, jax.Array]:
    """`attention_backward` by token: (dq, dk, dv) in q's and k's layout."""
    _check_layout(q, k, v, BY_TOKEN)
    return _backward(q, k, v, out, lse, grad_out, causal, scale, window, block_q, block_k, BY_TOKEN)


__all__ = ["BY_HEAD", "BY_TOKEN", "KERNEL", "MAX_STEPS", "Config", "Plan", "Walk", "attention", "attention_backward",
           "attention_backward_by_token", "attention_by_token", "attention_out", "attention_out_by_token"]
