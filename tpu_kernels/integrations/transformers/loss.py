"""The causal-LM loss through a fused LM-head cross entropy (no [tokens, vocab] logits):
Tokamax's `linear_softmax_cross_entropy_loss`, or with `shipped=True` tpu_kernels' own
`linear_cross_entropy` (no Tokamax needed; it also applies Gemma 2's final soft-capping).

Matches HF's ForCausalLMLoss: labels shifted left (or `shift_labels` as given), positions
labelled `ignore_index` left out, the mean over the counted positions, or the sum divided
by `num_items_in_batch` when the trainer passes it (gradient accumulation); the loss in
float32, as HF upcasts the logits.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def linear_softmax_cross_entropy_loss(*args, **kwargs):
    """tpu_kernels.tokamax.linear_softmax_cross_entropy_loss, imported at the first call: the
    package imports without Tokamax (Python 3.11)."""
    from tpu_kernels.tokamax import linear_softmax_cross_entropy_loss as op

    return op(*args, **kwargs)


def causal_lm_loss(
    hidden_states: torch.Tensor,  # [batch, seq, hidden]
    lm_head_weight: torch.Tensor,  # [vocab, hidden] (nn.Linear's layout)
    labels: torch.Tensor | None,  # int [batch, seq]
    *,
    num_items_in_batch: torch.Tensor | int | None = None,
    ignore_index: int = -100,
    shift_labels: torch.Tensor | None = None,
    shipped: bool = False,
    softcap: float | None = None,
) -> torch.Tensor:
    """HF's causal-LM loss of logits = hidden_states @ lm_head_weight.T, fused (soft-capped
    first by `softcap`: the shipped op's only)."""
    if shift_labels is None:
        shift_labels = F.pad(labels, (0, 1), value=ignore_index)[..., 1:]
    vocab, hidden = lm_head_weight.shape
    x = hidden_states.reshape(-1, hidden)
    target = shift_labels.reshape(-1).to(x.device)
    if target.shape[0] != x.shape[0]:
        raise ValueError(
            f"tpu_kernels causal-LM loss: {target.shape[0]} labels for {x.shape[0]} positions; labels "
            "(or shift_labels) must have the input's [batch, seq] shape."
        )
    counted = target != ignore_index
    # The op has no ignore_index: ignored rows get label 0 and their loss is dropped below,
    # which also zeroes their gradient (an out-of-range label would give a nonzero one).
    safe = torch.where(counted, target, 0)
    if not torch.compiler.is_compiling() and bool(((safe < 0) | (safe >= vocab)).any()):
        raise ValueError(
            f"tpu_kernels causal-LM loss: labels must be in [0, {vocab}) or {ignore_index} (ignored); "
            f"got values from {int(target.min())} to {int(target.max())}."
        )
    if shipped:
        from tpu_kernels.kernels import linear_cross_entropy

        # per token (0 where ignored), summed in float32: a bf16 sum would round the loss
        per_row = linear_cross_entropy(
            x, lm_head_weight, target, ignore_index=ignore_index, reduction="none", softcap=softcap
        )
        total = per_row.float().sum()
    else:
        if softcap is not None:
            raise ValueError(
                "tpu_kernels causal-LM loss: Tokamax's fused loss has no soft-capping; pass shipped=True."
            )
        # nn.Linear's [vocab, hidden] as it is: the op transposes inside its JAX function, where
        # XLA folds it into the matmul; lm_head_weight.T would copy the whole LM head per step.
        per_row = linear_softmax_cross_entropy_loss(
            x, safe, lm_head_weight, reduction="none", weight_layout="out_in"
        )
        total = torch.where(counted, per_row, 0.0).sum()
    if num_items_in_batch is None:
        return total / counted.sum()
    if torch.is_tensor(num_items_in_batch):
        num_items_in_batch = num_items_in_batch.to(total.device)
    return total / num_items_in_batch
