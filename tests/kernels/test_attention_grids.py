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
