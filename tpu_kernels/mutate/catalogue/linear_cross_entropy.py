"""linear_cross_entropy's mutants (tpu_kernels/kernels/linear_cross_entropy/pallas.py): the
online softmax's rescaling, the label's pick, the ragged vocabulary's masks, the soft-cap's
slope, the smoothing, and the backward's shares."""

from __future__ import annotations

from tpu_kernels.mutate.catalogue.base import LINEAR_CE, T_LINEAR_CE, Mutation, family_mutants

_lce = family_mutants(LINEAR_CE, T_LINEAR_CE, "linear_cross_entropy")


MUTANTS: tuple[Mutation, ...] = (
    _lce(
        "lce-hidden-gradient-not-rescaled",
        "    dh_ref[...] = lanes(rescale, d) * dh_ref[...] + jnp.dot(",
        "    dh_ref[...] = dh_ref[...] + jnp.dot(",
        "the hidden gradient's running sum keeps earlier blocks' weights after the row max grows",
    ),
    _lce(
        "lce-sum-not-rescaled",
        "    s_sc[...] = rescale * s_sc[...] + jnp.sum(p, axis=-1, keepdims=True)",
        "    s_sc[...] = s_sc[...] + jnp.sum(p, axis=-1, keepdims=True)",
        "the running sum of exp(z - m) mixes scales once the max moves: a wrong log-sum-exp",
    ),
    _lce(
        "lce-label-column-off-by-one",
        "    target = jnp.where(cols == y_ref[...], (1.0 - plan.smoothing) * z, 0.0)",
        "    target = jnp.where(cols == y_ref[...] + 1, (1.0 - plan.smoothing) * z, 0.0)",
        "the loss picks the logit beside the label's",
    ),
    _lce(
        "lce-ragged-weight-rows-kept",
        "        w = jnp.where(rows < plan.vocab, w, jnp.zeros_like(w))",
        "        w = w",
        "the last block's rows past the vocabulary (whatever VMEM held) enter the hidden gradient",
    ),
    _lce(
        "lce-ragged-logits-unmasked",
        "        logits = jnp.where(valid, logits, MASK)",
        "        logits = logits",
        "the logits past the vocabulary join the softmax",
    ),
    _lce(
        "lce-softcap-slope-dropped",
        "    if slope is not None:\n        grad *= slope",
        "    if False:\n        grad *= slope",
        "the weight's gradient forgets the soft-cap's derivative",
    ),
    _lce(
        "lce-smoothing-share-dropped-in-the-weight-gradient",
        "    if plan.smoothing:\n        grad -= plan.smoothing / plan.vocab",
        "    if False:\n        grad -= plan.smoothing / plan.vocab",
        "the weight's gradient leaves out label smoothing's uniform target",
    ),
    _lce(
        "lce-mean-share-ignores-the-count",
        "        g = g / jnp.sum(~ignored).astype(acc)",
        "        g = g / labels_flat.shape[0]",
        "the mean's gradient divides by every token, ignored ones included",
    ),
    _lce(
        "lce-label-row-of-the-hidden-gradient-dropped",
        "    dhidden = outs[2][:tokens] - coef[:, None] * picked",
        "    dhidden = outs[2][:tokens]",
        "the hidden gradient keeps the softmax half and loses the label's -W[y]",
    ),
)
