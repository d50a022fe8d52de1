"""linear_cross_entropy's references: torch (what the tests, checked mode and the benchmark
compare with: `F.cross_entropy(hidden @ weight.T, labels)`, the unfused path) and the JAX ones
(jax_reference.py, torch-free, re-exported here)."""

import torch
import torch.nn.functional as F

from tpu_kernels.kernels.linear_cross_entropy.jax_reference import (
    linear_cross_entropy_jax,
    linear_cross_entropy_xla,
)
from tpu_kernels.verification.tolerance import Reference, rms


def linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    *,
    ignore_index: int = -100,
    reduction: str = "mean",
    softcap: float | None = None,
    label_smoothing: float = 0.0,
) -> torch.Tensor:
    """torch's unfused LM head and loss: the [tokens, vocabulary] logits, then F.cross_entropy."""
    logits = hidden @ weight.T
    if softcap is not None:
        logits = softcap * torch.tanh(logits / softcap)
    loss = F.cross_entropy(
        logits.reshape(-1, weight.shape[0]),
        labels.reshape(-1),
        ignore_index=ignore_index,
        reduction=reduction,
        label_smoothing=label_smoothing,
    )
    return loss.reshape(labels.shape) if reduction == "none" else loss


# Checked mode's declaration (tpu_kernels.checked()): each logit sums d products and each loss
# a vocabulary-long log-sum-exp; hidden's gradient sums the vocabulary's rows, weight's the
# tokens'. `scale`: the logits' size (rms(hidden) * rms(weight) * sqrt(d)), at least 1.
def _sums(hidden, weight):
    return max(hidden.shape[-1], weight.shape[0])


def _grad_sums(hidden, weight):
    return max(hidden.shape[-1], weight.shape[0], hidden.numel() // max(hidden.shape[-1], 1))


def _logit_size(hidden, weight):
    return max(1.0, rms(hidden) * rms(weight) * hidden.shape[-1] ** 0.5)


CHECK = Reference(linear_cross_entropy, reduces=_sums, grad_reduces=_grad_sums, scale=_logit_size)

__all__ = ["CHECK", "linear_cross_entropy", "linear_cross_entropy_jax", "linear_cross_entropy_xla"]
