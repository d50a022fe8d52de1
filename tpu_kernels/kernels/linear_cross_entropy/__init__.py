"""Fused LM head + cross-entropy: torch.ops.tpu_kernels.linear_cross_entropy(hidden, weight,
labels, *, ignore_index=-100, reduction="mean", softcap=None, label_smoothing=0.0,
block_t=None, block_v=None), the loss of `F.cross_entropy(hidden @ weight.T, labels)` without
the [tokens, vocabulary] logits in HBM.

hidden is [..., d], weight [vocabulary, d] (an LM head's `nn.Linear.weight`), labels [...]
integers. The op returns (loss, lse, dhidden); calling `linear_cross_entropy(...)` returns the
loss alone. lse (each token's log-sum-exp) and dhidden (each token's loss gradient for its
hidden row, computed in the forward's pass over the vocabulary) are the residuals of the
backward kernel, registered as torch.ops.tpu_kernels.linear_cross_entropy_backward.
"""

from __future__ import annotations

import jax
import torch

from tpu_kernels.kernels import registry
from tpu_kernels.kernels.linear_cross_entropy import pallas, reference, shapes
from tpu_kernels.kernels.linear_cross_entropy.sharding import linear_cross_entropy_sharding
from tpu_kernels.op import tpu_kernel
from tpu_kernels.verification.tolerance import with_ignored


def _examples():
    """`tpu-kernels check`'s calls: the benchmark shapes in bfloat16, plain and soft-capped."""
    calls = []
    for tokens, d, vocab in shapes.BENCH.values():
        args = (
            jax.ShapeDtypeStruct((tokens, d), "bfloat16"),
            jax.ShapeDtypeStruct((vocab, d), "bfloat16"),
            jax.ShapeDtypeStruct((tokens,), "int32"),
        )
        calls += [(args, {}), (args, {"softcap": 30.0})]
    return calls


def _sharding_examples():
    """Concrete calls the sharding simulation runs the rule at (tests/test_sharding_sim.py):
    each reduction, a ragged vocabulary and ignored tokens."""

    def call(tokens, d, vocab, **kw):
        gen = torch.Generator().manual_seed(tokens + vocab)
        labels = torch.randint(0, vocab, (tokens,), generator=gen)
        labels[::4] = -100
        hidden = torch.randn(tokens, d, generator=gen)
        weight = torch.randn(vocab, d, generator=gen) * d**-0.5
        return (hidden, weight, labels), kw

    return [call(24, 16, 200, reduction="none"), call(30, 8, 130, reduction="sum"), call(12, 16, 50)]


# Under torch.autocast it casts like torch's linear: hidden and weight to the autocast dtype.
linear_cross_entropy = tpu_kernel(
    "tpu_kernels::linear_cross_entropy",
    outputs=("loss", "lse", "dhidden"),
    residuals=("lse", "dhidden"),
    visible_kernel=pallas.linear_cross_entropy_loss,  # a call needing no gradient: one matmul
    examples=_examples,
    autocast="lower_precision_fp",
    sharding=linear_cross_entropy_sharding,
    sharding_examples=_sharding_examples,
    check_reference=with_ignored(reference.CHECK, "block_t", "block_v"),
    tune=pallas.Config.space(),
)(pallas.linear_cross_entropy)
linear_cross_entropy.def_backward(pallas.linear_cross_entropy_backward, wrt=("hidden", "weight"))


def _inputs(shape, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, ...]:
    """hidden, weight (scaled so the logits are O(1)) and labels, every fifth ignored."""
    tokens, d, vocab = shape
    labels = torch.randint(0, vocab, (tokens,), device=device)
    labels[::5] = -100
    return (
        registry.randn((tokens, d), dtype, device),
        registry.randn((vocab, d), dtype, device, scale=max(d, 1) ** -0.5),
        labels,
    )


registry.register(
    __name__,
    op=linear_cross_entropy,
    inputs=_inputs,
    reduction=lambda shape: max(shape[1], shape[2]),  # d-long logits, vocabulary-long sums
    flops=lambda shape: 2.0 * shape[0] * shape[1] * shape[2],  # the LM head's matmul
)

__all__ = ["linear_cross_entropy"]
