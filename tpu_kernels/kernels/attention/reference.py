"""attention's references: torch (what the tests, checked mode and the benchmark compare
with) and the JAX one (jax_reference.py, torch-free, re-exported here)."""

import math

import torch

from tpu_kernels.kernels.attention.jax_reference import attention_jax
from tpu_kernels.verification.tolerance import Reference, rms


def visible(seq_q: int, seq_k: int, *, causal: bool, window: int | None, device=None) -> torch.Tensor | None:
    """[seq_q, seq_k] True where a query sees a key (None: everywhere): top-left causal
    (j <= i, as torch's is_causal), and i - window < j with a window."""
    if not causal:
        return None
    seen = torch.ones(seq_q, seq_k, dtype=torch.bool, device=device).tril()
    if window is not None:
        seen &= torch.ones_like(seen).triu(1 - window)
    return seen


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    scale: float | None = None,
    window: int | None = None,
) -> torch.Tensor:
    """Softmax(q k^T * scale) v with k and v repeated over their groups of q heads."""
    group = q.shape[1] // max(k.shape[1], 1)
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    sm = (1.0 / math.sqrt(q.shape[-1]) if q.shape[-1] else 1.0) if scale is None else scale
    s = (q @ k.transpose(-1, -2)) * sm
    seen = visible(q.shape[-2], k.shape[-2], causal=causal, window=window, device=q.device)
    if seen is not None:
        s = s.masked_fill(~seen, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


# Checked mode's declaration (tpu_kernels.checked()): out only (lse is a residual). Each score
# sums head_dim products and each output seq_k weighted values, so the tolerance grows with the
# longer (by the one rule of tpu_kernels.verification.tolerance); the gradients sum over the
# queries, and a kv head's over its group's q heads, too. `scale`: the values' size, times 4
# for the probabilities rounded to the inputs' dtype before p @ v (16 for the gradients, which
# round twice as many).
def _sums(q, k):
    return max(q.shape[-1], k.shape[-2])


def _grad_sums(q, k):
    return max(q.shape[-1], q.shape[-2] * q.shape[1] // max(k.shape[1], 1), k.shape[-2])


CHECK = Reference(
    attention,
    reduces=_sums,
    grad_reduces=_grad_sums,
    scale=lambda v: 4 * max(1.0, rms(v)),
    grad_scale=lambda v: 16 * max(1.0, rms(v)),
)

__all__ = ["CHECK", "attention", "attention_jax", "visible"]
