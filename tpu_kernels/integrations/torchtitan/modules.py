"""torchtitan's RMSNorm, SwiGLU feed-forward and flex attention, with forwards on tpu_kernels ops.

Each class subclasses torchtitan's own module and its Config, so a converted config builds
the same parameters, with the same names, initialisers and sharding configs (torchtitan's
`Module.parallelize` reads them), and only `forward` differs. Each forward keeps the stock
parameter names, which torchtitan's sharding configs key their inputs by (`input` for the
norm, `x` for the feed-forward, `q_BLNH`/`k_BLNH`/`v_BLNH` for attention).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.nn.attention.flex_attention import BlockMask, create_mask
from torchtitan.models.common.attention import FlexAttention
from torchtitan.models.common.feed_forward import FeedForward
from torchtitan.models.common.linear import Linear
from torchtitan.models.common.nn_modules import RMSNorm

from tpu_kernels import tokamax
from tpu_kernels.kernels import rmsnorm


class TpuKernelsRMSNorm(RMSNorm):
    """RMSNorm (`nn.RMSNorm` over the last dim) on tpu_kernels' Pallas `rmsnorm`: statistics
    in float32, the result in the input's dtype; without a weight, Tokamax's `rms_norm`."""

    @dataclass(kw_only=True, slots=True)
    class Config(RMSNorm.Config):
        pass

    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002 - the stock name
        # nn.RMSNorm's eps=None (F.rms_norm's) is the machine epsilon of the dtype it computes
        # in: float64's for float64 input, float32's for every other (bfloat16 and float16 are
        # upcast), not the input dtype's own (bfloat16's is 7.8e-3, 2^16 times float32's)
        eps = self.eps if self.eps is not None else torch.finfo(_compute_dtype(input.dtype)).eps
        if self.weight is None:
            return tokamax.rms_norm(input, eps=eps)
        return rmsnorm(input, self.weight, eps=eps)


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


class TpuKernelsFeedForward(FeedForward):
    """SwiGLU, `w2(silu(w1(x)) * w3(x))`, with w1 and w3 in one Tokamax `gated_linear_unit`
    on their [out, in] weights as stored (no transposed copy); w2 stays torchtitan's Linear.

    Only plain, bias-free `Linear` projections are fused: a w1 or w3 that another converter
    made something else (float8, LoRA) keeps the stock forward, which calls it."""

    @dataclass(kw_only=True, slots=True)
    class Config(FeedForward.Config):
        pass

    def __init__(self, config: Config):
        super().__init__(config)
        self._fused = all(type(w) is Linear and w.bias is None for w in (self.w1, self.w3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self._fused:
            return super().forward(x)
        h = tokamax.gated_linear_unit(
            x, self.w1.weight, self.w3.weight, activation="silu", weight_layout="out_in"
        )
        return self.w2(h)


# BlockMask -> its dense mask: torchtitan passes one BlockMask to every layer of a step.
_DENSE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def dense_mask(block_mask: BlockMask) -> torch.Tensor:
    """The boolean [batch, 1, q_len, kv_len] mask (True = attend) a flex `BlockMask` stands
    for: its mask_mod at every position (the blocks only skip work where it is all False).
    Built once per BlockMask in eager code (every layer of a step shares it); under
    torch.compile it is part of the graph."""
    if torch.compiler.is_compiling():
        return _materialise(block_mask)
    mask = _DENSE.get(block_mask)
    if mask is None:
        mask = _DENSE[block_mask] = _materialise(block_mask)
    return mask


def _materialise(block_mask: BlockMask) -> torch.Tensor:
    batch, _, q_len, kv_len = block_mask.shape
    device = block_mask.kv_num_blocks.device
    return create_mask(block_mask.mask_mod, batch, 1, q_len, kv_len, device=device)


class TpuKernelsAttention(FlexAttention):
    """Inner attention on Tokamax's `dot_product_attention` ([batch, seq, heads, head_dim], the
    layout torchtitan's q/k/v already have; grouped-query attention without repeating the
    kv-heads), masked by the dense form of the flex `BlockMask` torchtitan builds (causal,
    packed documents). A call with a `score_mod` or an `out_transform` (which flex applies
    and Tokamax has no place for) runs the stock flex attention."""

    @dataclass(kw_only=True, slots=True)
    class Config(FlexAttention.Config):
        pass

    def forward(
        self,
        q_BLNH: torch.Tensor,
        k_BLNH: torch.Tensor,
        v_BLNH: torch.Tensor,
        *,
        attention_masks: BlockMask,
        score_mod: Callable | None = None,
        scale: float | None = None,
        enable_gqa: bool = False,
        out_transform: Callable | None = None,
        **kwargs,
    ) -> torch.Tensor:
        if score_mod is not None or out_transform is not None:
            return super().forward(
                q_BLNH, k_BLNH, v_BLNH, attention_masks=attention_masks, score_mod=score_mod,
                scale=scale, enable_gqa=enable_gqa, out_transform=out_transform, **kwargs,
            )  # fmt: skip
        if not isinstance(attention_masks, BlockMask):
            raise TypeError(
                f"tpu_kernels torchtitan attention: attention_masks must be a flex BlockMask (what "
                f"torchtitan builds for flex attention), got {type(attention_masks).__name__}."
            )
        # enable_gqa needs nothing: Tokamax takes the kv-heads as they are
        return tokamax.dot_product_attention(
            q_BLNH, k_BLNH, v_BLNH, mask=dense_mask(attention_masks), scale=scale
        )
