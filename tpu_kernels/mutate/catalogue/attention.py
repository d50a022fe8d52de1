"""attention's mutants (tpu_kernels/kernels/attention/pallas.py): the masks, the grouped heads'
index maps, the grids' bands, the padding and the scale."""

from __future__ import annotations

from tpu_kernels.mutate.catalogue.base import ATTENTION, T_ATTENTION, Mutation, family_mutants

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
        "attention-kv-head-modulo",
        "lambda b_, h_, i, s: (b_, h_ // plan.group, plan.kv_block(i, s), 0)\n    )\n    row_spec = pl.BlockSpec((None, None, plan.bq, 1), lambda b_, h_, i, s: (b_, h_, i, 0))\n    itemsize",
        "lambda b_, h_, i, s: (b_, h_ % max(k.shape[1], 1), plan.kv_block(i, s), 0)\n    )\n    row_spec = pl.BlockSpec((None, None, plan.bq, 1), lambda b_, h_, i, s: (b_, h_, i, 0))\n    itemsize",
        "the forward pairs q head h with kv head h mod kv_heads (interleaved groups), not h // group",
    ),
    _attention(
        "attention-dkv-sums-one-head-of-the-group",
        "        return (b_, hk_ * plan.group + t // steps, plan.q_block(j, t % steps), 0)",
        "        return (b_, hk_ * plan.group, plan.q_block(j, t % steps), 0)",
        "dK and dV read the group's first q head for every member: the other heads' gradients are lost",
    ),
    _attention(
        "attention-band-one-block-short",
        "        return min(self.nk, -(-(self.bq + self.window - 1) // self.bk) + 1)",
        "        return min(self.nk, -(-(self.bq + self.window - 1) // self.bk))",
        "a windowed q block's kv steps stop a block short of the band when it straddles a boundary",
    ),
    # (Padding lse with 0 instead of +inf, or the padded queries' cotangent with ones instead of
    # zeros, is each an equivalent mutant: the other keeps the padded rows' probabilities or
    # cotangents zero, so they add nothing to dK and dV either way.)
    _attention(
        "attention-dkv-band-ends-a-block-early",
        "        return jnp.minimum((j * self.bk + self.bk + self.window - 2) // self.bq, self.nq - 1)",
        "        return jnp.minimum((j * self.bk + self.window - 1) // self.bq, self.nq - 1)",
        "a kv block's band of queries is measured from its first key: dK and dV miss its last keys' queries",
    ),
    _attention(
        "attention-padded-keys-unmasked",
        "    def padded_keys(self) -> bool:\n        return self.sk != self.seq_k",
        "    def padded_keys(self) -> bool:\n        return False",
        "keys past seq_k (the padding's zeros) are attended",
    ),
    _attention(
        "attention-dq-scale-dropped",
        "        dq_ref[...] = (dq_sc[...] * scale).astype(dq_ref.dtype)",
        "        dq_ref[...] = dq_sc[...].astype(dq_ref.dtype)",
        "dq without the softmax scale",
    ),
)
