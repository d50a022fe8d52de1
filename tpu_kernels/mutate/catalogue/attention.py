"""attention's mutants (tpu_kernels/kernels/attention/pallas.py): the masks, the grouped heads'
index maps, the grids' bands, the last blocks' overhang and the scale."""

from __future__ import annotations

from tpu_kernels.mutate.catalogue.base import ATTENTION, T_ATTENTION, Mutation, _check, family_mutants

_attention = family_mutants(ATTENTION, T_ATTENTION, "attention")


MUTANTS: tuple[Mutation, ...] = (
    _attention(
        "attention-causal-excludes-the-diagonal",
        "            seen = cols <= rows\n",
        "            seen = cols < rows\n",
        "a query no longer sees its own key (and the first query sees none)",
    ),
    _attention(
        "attention-window-one-key-wider",
        "            seen = seen & (cols > rows - plan.window)",
        "            seen = seen & (cols >= rows - plan.window)",
        "a window of w sees w + 1 keys",
    ),
    _attention(
        "attention-edge-misses-the-diagonal",
        "        crossed.append(k_last > q_start)",
        "        crossed.append(k_start > q_start)",
        "a block on the causal diagonal counts as inside the mask: its queries see later keys",
    ),
    _attention(
        "attention-edge-misses-the-last-q-block",
        "        crossed.append(q_last >= plan.seq_q)",
        "        crossed.append(q_last > plan.seq_q)",
        "dK/dV take a last q block that runs one row past seq_q for a whole one: its overhang's q and dO rows stay",
    ),
    _attention(
        "attention-table-never-masks",
        "                flags = RUN | (EDGE if _edge(plan, q_start, k_start, ragged_rows=not q_major) else 0)",
        "                flags = RUN",
        "a causal call's tables mark no block as an edge: the diagonal blocks run unmasked",
    ),
    _attention(
        "attention-table-skips-keys-no-query-sees",
        "            pairs.append(o << 16 | (plan.nq - 1))\n            extras.append(FIRST | LAST)\n",
        "",
        "dK/dV never visit a kv block past every query: its gradient is never written (not zeros)",
    ),
    _attention(
        "attention-rectangle-runs-every-step",
        "        return o, n, m, t == 0, t == pl.num_programs(3) - 1, run, edge",
        "        return o, n, m, t == 0, t == pl.num_programs(3) - 1, run | True, edge",
        "a walk past MAX_STEPS runs the steps past a block's band too, each repeating its last block",
    ),
    _attention(
        "attention-kv-head-modulo",
        "    kv_spec = _spec(layout, plan.bk, d, lambda *ids: (ids[0], ids[1] // plan.group, walk.blocks(*ids)[1]))\n"
        "    row_spec",
        "    kv_spec = _spec(layout, plan.bk, d, lambda *ids: (ids[0], ids[1] % max(kh.shape[1], 1), "
        "walk.blocks(*ids)[1]))\n    row_spec",
        "the forward pairs q head h with kv head h mod kv_heads (interleaved groups), not h // group",
    ),
    _attention(
        "attention-dkv-sums-one-head-of-the-group",
        "        return (ids[0], ids[1] * plan.group + member, i)",
        "        return (ids[0], ids[1] * plan.group, i)",
        "dK and dV read the group's first q head for every member: the other heads' gradients are lost",
    ),
    _attention(
        "attention-band-one-block-short",
        "        return min(self.nk, -(-(self.bq + self.window - 1) // self.bk) + 1)",
        "        return min(self.nk, -(-(self.bq + self.window - 1) // self.bk))",
        "a windowed q block's kv steps stop a block short of the band when it straddles a boundary",
    ),
    _attention(
        "attention-dkv-band-ends-a-block-early",
        "        return _min((j * self.bk + self.bk + self.window - 2) // self.bq, self.nq - 1)",
        "        return _min((j * self.bk + self.window - 1) // self.bq, self.nq - 1)",
        "a kv block's band of queries is measured from its first key: dK and dV miss its last keys' queries",
    ),
    _attention(
        "attention-padded-keys-unmasked",
        'overhang is masked and its k, v rows zeroed."""\n        return self.sk != self.seq_k',
        'overhang is masked and its k, v rows zeroed."""\n        return False',
        "keys past seq_k (the last kv block's unspecified overhang) are attended",
    ),
    _attention(
        "attention-forward-keeps-the-v-overhang",
        "        v = _real_rows(v, k_start, plan.seq_k) if masked and plan.padded_keys else v",
        "        v = v",
        "the forward's p @ v reads the last kv block's unspecified v rows (p is 0 there, but 0 x NaN is NaN)",
    ),
    _attention(
        "attention-dkv-keeps-the-query-overhang",
        "        if masked and plan.ragged_q:  # queries past seq_q: zero q and dO",
        "        if False:  # queries past seq_q",
        "dK and dV sum the last q block's unspecified rows into every key's gradient",
    ),
    _attention(
        "attention-dq-keeps-the-key-overhang",
        "        if masked and plan.padded_keys:  # keys past seq_k: p is 0 there",
        "        if False:  # keys past seq_k: p is 0 there",
        "dQ multiplies the last kv block's unspecified k and v rows by zero probabilities (NaN stays NaN)",
    ),
    _attention(
        "attention-dq-scale-dropped",
        "        dq_ref[...] = (dq_sc[...] * scale).astype(dq_ref.dtype)",
        "        dq_ref[...] = dq_sc[...].astype(dq_ref.dtype)",
        "dq without the softmax scale",
    ),
    _attention(
        "attention-fused-dq-scale-dropped",
        "                dq = (dq_sc[m, : plan.seq_q, :] * scale).astype(dq_ref.dtype)",
        "                dq = dq_sc[m, : plan.seq_q, :].astype(dq_ref.dtype)",
        "the fused backward's dq without the softmax scale",
    ),
    _attention(
        "attention-fused-dq-one-member",
        "            dq_sc[member, dq_rows, :] += jnp.dot(ds, k, preferred_element_type=acc)",
        "            dq_sc[0, dq_rows, :] += jnp.dot(ds, k, preferred_element_type=acc)",
        "the fused backward adds every q head's dQ of a group into the first's",
    ),
    _attention(
        "attention-fused-dq-zeroed-per-kv-block",
        "        @pl.when(ends[0])\n        def _init_dq():",
        "        @pl.when(first)\n        def _init_dq():",
        "the fused backward's dQ starts over at each kv block: a query keeps only its last kv block's share",
    ),
    _attention(
        "attention-fused-keeps-the-key-overhang",
        "        if fused and masked and plan.padded_keys:",
        "        if False:",
        "the fused backward's ds @ k reads the last kv block's unspecified k and v rows into dQ",
    ),
    _attention(
        "attention-fused-never-by-default",
        "    return _vmem.fits(_params_need(plan, d, itemsize) + _fused_bytes(plan, d, itemsize))",
        "    return False",
        "a backward left to its default never fuses dQ (the two kernels: slower on a v5e, the walk record's fused run)",
    ),
    _attention(
        "attention-diagonal-chunk-one-key-short",
        "    return slice(lo, lo + plan.sub), lo + plan.sub\n",
        "    return slice(lo, lo + plan.sub), lo + plan.sub - LANES\n",
        "a diagonal chunk reads its keys up to its first row, not its last: its rows miss their last 128 keys",
    ),
    _attention(
        "attention-diagonal-chunk-rows-from-zero",
        "        rows, width = _chunk(plan, lo)\n        s = _scores(_scaled(q_ref[rows, :], scale), k_ref[:width, :], plan, i * plan.bq + (lo or 0)",
        "        rows, width = _chunk(plan, lo)\n        s = _scores(_scaled(q_ref[rows, :], scale), k_ref[:width, :], plan, i * plan.bq",
        "the forward masks a diagonal chunk as if its rows started the block: its rows lose the keys past the chunk's first rows",
    ),
    _attention(
        "attention-diagonal-skips-a-real-chunk",
        "                pl.when(q_start + lo < plan.seq_q)(chunk)",
        "                pl.when(q_start + lo + plan.sub <= plan.seq_q)(chunk)",
        "a diagonal chunk that runs past seq_q is skipped whole, its real rows with it",
    ),
    _attention(
        "attention-diagonal-dkv-chunk-keys-at-zero",
        "        dk_sc[:width, :] += jax.lax.dot_general(ds, q, transposed_lhs, preferred_element_type=acc)",
        "        dk_sc[plan.bk - width :, :] += jax.lax.dot_general(ds, q, transposed_lhs, preferred_element_type=acc)",
        "dK adds a diagonal chunk's keys into the block's last rows, not its first",
    ),
    _attention(
        "attention-diagonal-never-by-default",
        "    if divides(DIAGONAL_SUB):\n        return DIAGONAL_SUB",
        "    if True:\n        return 0",
        "the default never chunks the diagonal (slower on a v5e: the walk record's diagonal runs)",
    ),
    _attention(
        "attention-whole-never",
        "    return seq_q == seq_k and DEFAULT_BLOCKS[0] < seq_q <= WHOLE and seq_q % LANES == 0 and d <= LANES",
        "    return False",
        "a causal square of 1025-1536 tokens keeps its blocks (slower on a v5e: the walk record's diagonal runs)",
    ),
    Mutation(
        "attention-by-token-head-as-row-block",
        ATTENTION,
        "        b, head, block = where(*ids)\n        return b, block, head",
        "        b, head, block = where(*ids)\n        return b, head, block",
        "by token, the head index taken as the row block and the row block as the head's lanes",
        ("tests/kernels/test_attention_by_token.py",),
        test_filter="not by_token_equals_by_head",
        check=_check("attention"),
    ),
)
