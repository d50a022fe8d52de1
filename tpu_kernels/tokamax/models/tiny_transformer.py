"""A small decoder-only transformer whose hot spots switch to Tokamax ops with one flag.

    model = TinyTransformer(Config(), use_tokamax=False)   # plain PyTorch
    model.use_tokamax = True                               # same weights, Tokamax ops

Embedding (tokens and learned positions), then per layer: RMSNorm, causal
grouped-query attention, RMSNorm, SwiGLU MLP, each with a residual; a final
RMSNorm and an LM head with cross-entropy. With `use_tokamax` the four marked
places call Tokamax instead of torch:

    RMSNorm         F.rms_norm                          -> tokamax rms_norm
    attention       F.scaled_dot_product_attention      -> tokamax dot_product_attention
    MLP gate        silu(x @ w_gate) * (x @ w_up)       -> tokamax gated_linear_unit
    head + loss     F.cross_entropy(h @ w_head, y)      -> tokamax linear_softmax_cross_entropy_loss

Weights are stored in the layouts both paths use without copies: the gate/up
projection as Tokamax's fused [dim, 2, hidden] and the head as [dim, vocab].
Attention projections reshape to [batch, seq, heads, head_dim], Tokamax's
layout; the torch path transposes to F.sdpa's [batch, heads, seq, head_dim].
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from tpu_kernels import tokamax as tk


@dataclass(frozen=True)
class Config:
    vocab: int = 96
    dim: int = 32
    heads: int = 4
    kv_heads: int = 2
    layers: int = 2
    hidden: int = 64
    max_seq: int = 32
    eps: float = 1e-6


class TinyTransformer(nn.Module):
    def __init__(self, config: Config = Config(), *, use_tokamax: bool = False) -> None:
        super().__init__()
        if config.dim % config.heads or config.heads % config.kv_heads:
            raise ValueError(
                f"TinyTransformer: dim must divide by heads and heads by kv_heads; got {config}."
            )
        self.config = config
        self.use_tokamax = use_tokamax
        c = config
        self.head_dim = c.dim // c.heads
        self.tok_embed = nn.Embedding(c.vocab, c.dim)
        self.pos_embed = nn.Embedding(c.max_seq, c.dim)
        self.blocks = nn.ModuleList(_Block(c, self.head_dim) for _ in range(c.layers))
        self.final_norm = nn.Parameter(torch.ones(c.dim))
        self.w_head = nn.Parameter(torch.randn(c.dim, c.vocab) * c.dim**-0.5)  # [dim, vocab]

    def norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        if self.use_tokamax:
            return tk.rms_norm(x, weight, eps=self.config.eps)
        return F.rms_norm(x, (x.shape[-1],), weight, self.config.eps)

    def hidden_states(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [batch, seq] -> the final normalised hidden states [batch, seq, dim]."""
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tok_embed(tokens) + self.pos_embed(positions)
        for block in self.blocks:
            x = block(x, self)
        return self.norm(x, self.final_norm)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The mean next-token cross-entropy (float32 on the Tokamax path, as Tokamax returns it)."""
        h = self.hidden_states(tokens).flatten(0, 1)
        if self.use_tokamax:
            return tk.linear_softmax_cross_entropy_loss(h, targets.flatten(), self.w_head, reduction="mean")
        return F.cross_entropy(h @ self.w_head, targets.flatten())


class _Block(nn.Module):
    def __init__(self, c: Config, head_dim: int) -> None:
        super().__init__()
        self.attn_norm = nn.Parameter(torch.ones(c.dim))
        self.wq = nn.Linear(c.dim, c.heads * head_dim, bias=False)
        self.wk = nn.Linear(c.dim, c.kv_heads * head_dim, bias=False)
        self.wv = nn.Linear(c.dim, c.kv_heads * head_dim, bias=False)
        self.wo = nn.Linear(c.heads * head_dim, c.dim, bias=False)
        self.mlp_norm = nn.Parameter(torch.ones(c.dim))
        self.w_gate_up = nn.Parameter(torch.randn(c.dim, 2, c.hidden) * c.dim**-0.5)  # [dim, 2, hidden]
        self.w_down = nn.Linear(c.hidden, c.dim, bias=False)
        self.shape = (c.heads, c.kv_heads, head_dim)

    def forward(self, x: torch.Tensor, model: TinyTransformer) -> torch.Tensor:
        b, t, _ = x.shape
        heads, kv_heads, head_dim = self.shape
        h = model.norm(x, self.attn_norm)
        q = self.wq(h).view(b, t, heads, head_dim)  # [batch, seq, heads, head_dim]
        k = self.wk(h).view(b, t, kv_heads, head_dim)
        v = self.wv(h).view(b, t, kv_heads, head_dim)
        if model.use_tokamax:
            a = tk.dot_product_attention(q, k, v, is_causal=True)
        else:
            a = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True, enable_gqa=True
            ).transpose(1, 2)
        x = x + self.wo(a.reshape(b, t, heads * head_dim))
        h = model.norm(x, self.mlp_norm)
        if model.use_tokamax:
            g = tk.gated_linear_unit(h, self.w_gate_up, activation="silu")
        else:
            g = F.silu(h @ self.w_gate_up[:, 0]) * (h @ self.w_gate_up[:, 1])
        return x + self.w_down(g)


def synthetic_batch(
    config: Config, batch: int, seq: int, *, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token sequences that step by a per-sequence stride (mod vocab), and their next tokens:
    learnable from the context, so the loss falls within a few steps."""
    start = torch.randint(0, config.vocab, (batch, 1), generator=generator)
    stride = torch.randint(1, 4, (batch, 1), generator=generator)
    seqs = (start + stride * torch.arange(seq + 1)) % config.vocab
    return seqs[:, :-1], seqs[:, 1:]


__all__ = ["Config", "TinyTransformer", "synthetic_batch"]
