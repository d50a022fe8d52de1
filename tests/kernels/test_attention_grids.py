"""attention's grids: which (q block, kv block) pairs each kernel visits, against the mask by
brute force (tests/kernels/test_attention.py tests the results; the TPU suite imports that
file, so the Hypothesis test lives here)."""

import torch
from hypothesis import given
from hypothesis import strategies as st

from tests.helpers import hypothesis_settings
from tpu_kernels.kernels.attention import pallas, reference


def _visited(plan, outer, kv_inner):
    steps = plan.kv_steps if kv_inner else plan.q_steps
    first, last, block = (
        (plan.first_kv, plan.last_kv, plan.kv_block)
        if kv_inner
        else (plan.first_q, plan.last_q, plan.q_block)
    )
    return {int(block(outer, s)) for s in range(steps) if int(first(outer)) + s <= int(last(outer))}


def _needed(plan):
    """(q block, kv block) pairs with a visible (query, key) pair, by brute force."""
    seen = reference.visible(plan.sq, plan.sk, causal=plan.causal, window=plan.window)
    if seen is None:
        seen = torch.ones(plan.sq, plan.sk, dtype=torch.bool)
    seen[:, plan.seq_k :] = False
    return {
        (i, j)
        for i in range(plan.nq)
        for j in range(plan.nk)
        if seen[i * plan.bq : (i + 1) * plan.bq, j * plan.bk : (j + 1) * plan.bk].any()
    }


@given(
    bq=st.sampled_from([8, 16, 64]),
    bk=st.sampled_from([8, 32, 128]),
    nq=st.integers(1, 9),
    extra_k=st.integers(0, 3),
    causal=st.booleans(),
    window=st.one_of(st.none(), st.integers(1, 300)),
)
@hypothesis_settings(200, 1000)
def test_each_grid_visits_exactly_the_blocks_its_mask_reaches(bq, bk, nq, extra_k, causal, window):
    """The forward and dQ grids give each q block every kv block with a visible key, once, and
    no other; the dK/dV grid the converse. With a window the inner axis is the band's width."""
    window = window if causal else None
    sq = nq * bq
    sk = -(-sq // bk) * bk + extra_k * bk
    plan = pallas.Plan(sq, sk, sq, sk, bq, bk, 1, causal, window)
    needed = _needed(plan)
    for i in range(plan.nq):
        assert _visited(plan, i, True) == {j for (a, j) in needed if a == i}, (i, plan)
    for j in range(plan.nk):
        assert _visited(plan, j, False) == {i for (i, b) in needed if b == j}, (j, plan)


def _masked(plan, i, j, ragged_rows):
    """Whether a block pair needs the masks, by brute force: a hidden (query, key) pair inside
    the real lengths, a key past seq_k, or (dK/dV) a query past seq_q."""
    seen = reference.visible(plan.sq, plan.sk, causal=plan.causal, window=plan.window)
    block = (slice(i * plan.bq, (i + 1) * plan.bq), slice(j * plan.bk, (j + 1) * plan.bk))
    hidden = seen is not None and not seen[block].all()
    return bool(hidden or (j + 1) * plan.bk > plan.seq_k or (ragged_rows and (i + 1) * plan.bq > plan.seq_q))


@given(
    bq=st.sampled_from([8, 16, 64]),
    bk=st.sampled_from([8, 32, 128]),
    seq_q=st.integers(1, 300),
    extra_k=st.integers(-100, 300),
    group=st.integers(1, 3),
    window=st.one_of(st.none(), st.integers(1, 300)),
)
@hypothesis_settings(200, 1000)
def test_each_causal_table_steps_through_exactly_the_blocks_its_mask_reaches(
    bq, bk, seq_q, extra_k, group, window
):
    """A causal call's step tables: the forward's and dQ's give each q block, in order, every
    kv block with a visible key once, the first flagged FIRST and the last LAST; dK/dV's give
    each kv block its q blocks once per member of its group (a kv block no query sees: one step
    that runs nothing), and EDGE marks exactly the pairs that need the masks."""
    seq_k = max(1, seq_q + extra_k) if window is None else max(seq_q, seq_q + extra_k)
    sq, sk = -(-seq_q // bq) * bq, -(-seq_k // bk) * bk
    plan = pallas.Plan(seq_q, seq_k, sq, sk, bq, bk, group, True, window)
    needed = _needed(plan)
    for q_major in (True, False):
        table = pallas._table(plan, q_major)
        assert table is not None and table.shape[1] <= pallas.MAX_STEPS
        steps = [(int(p) >> 16, int(p) & 0xFFFF, int(x) >> 4, int(x) & 15) for p, x in table.T]
        outers = [o for o, *_ in steps]
        assert outers == sorted(outers) and set(outers) == set(range(plan.nq if q_major else plan.nk))
        for o in set(outers):
            mine = [(n, m, f) for (o_, n, m, f) in steps if o_ == o]
            ran = [(m, n) for n, m, f in mine if f & pallas.RUN]
            want = sorted({j if q_major else i for (i, j) in needed if (i if q_major else j) == o})
            members = 1 if q_major else group
            assert ran == [(m, n) for m in range(members) for n in want], (o, q_major, plan)
            assert mine[0][2] & pallas.FIRST and mine[-1][2] & pallas.LAST, (o, plan)
            assert not any(f & (pallas.FIRST | pallas.LAST) for _, _, f in mine[1:-1]), (o, plan)
            for n, _, f in mine:
                if f & pallas.RUN:
                    i, j = (o, n) if q_major else (n, o)
                    assert bool(f & pallas.EDGE) == _masked(plan, i, j, not q_major), (i, j, q_major, plan)
