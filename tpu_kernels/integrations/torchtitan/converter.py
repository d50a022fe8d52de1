"""The model converter: a torchtitan model config in, the same config with tpu_kernels modules out."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, fields

from torchtitan.models.common.attention import FlexAttention
from torchtitan.models.common.feed_forward import FeedForward
from torchtitan.models.common.linear import Linear
from torchtitan.models.common.nn_modules import RMSNorm
from torchtitan.protocols.model import ModelConfigConverter
from torchtitan.protocols.module import Module

from tpu_kernels.integrations.torchtitan.modules import (
    TpuKernelsAttention,
    TpuKernelsFeedForward,
    TpuKernelsRMSNorm,
)


def _swapped(
    cfg: Module.Config, norm: bool, attention: bool, feed_forward: bool
) -> tuple[type[Module], Module.Config] | None:
    """The tpu_kernels twin of one module config (its module class and the config), or None to
    keep it. Exact types only: a subclass (a sigmoid-gated feed-forward, another converter's
    module) has a forward of its own that the twin would not run."""
    kind = type(cfg)
    if norm and kind is RMSNorm.Config:
        twin = TpuKernelsRMSNorm
    elif attention and kind is FlexAttention.Config:
        twin = TpuKernelsAttention
    elif (
        feed_forward
        and kind is FeedForward.Config
        and all(type(w) is Linear.Config and not w.bias for w in (cfg.w1, cfg.w3))
    ):
        twin = TpuKernelsFeedForward
    else:
        return None
    return twin, twin.Config(**{f.name: getattr(cfg, f.name) for f in fields(cfg) if f.init})


def convert(
    model_config: Module.Config, *, norm: bool = True, attention: bool = True, feed_forward: bool = True
) -> Counter:
    """Swap, in place, every RMSNorm, flex attention and SwiGLU feed-forward config in the tree
    for its tpu_kernels twin; returns how many of each kind it swapped."""
    swapped: Counter = Counter()
    for _fqn, cfg, parent, attr in reversed(list(model_config.traverse(Module.Config, recurse=True))):
        found = _swapped(cfg, norm, attention, feed_forward)
        if found is None:
            continue
        module, new = found
        if parent is None:
            raise ValueError(
                f"TpuKernelsConverter: the root config is a {type(cfg).__qualname__}; convert a model config "
                "(Llama 3, Qwen 3), whose norms, attention and feed-forwards it swaps."
            )
        if isinstance(parent, list):
            parent[attr] = new
        else:
            setattr(parent, attr, new)
        swapped[module.__name__] += 1
    return swapped


class TpuKernelsConverter(ModelConfigConverter):
    """torchtitan's model converter for tpu_kernels: RMSNorm -> tpu_kernels' Pallas rmsnorm,
    flex attention -> Tokamax's dot_product_attention, SwiGLU feed-forward -> Tokamax's
    gated_linear_unit (w2 stays a Linear). Pass `TpuKernelsConverter.Config()` in a model
    registry's `converters` (before LoRA; float8 converters first, so their Linears are left
    alone)."""

    @dataclass(kw_only=True, slots=True)
    class Config(ModelConfigConverter.Config):
        norm: bool = True
        """Swap the RMSNorms (the blocks', Qwen 3's q/k norms, the final norm)."""

        attention: bool = True
        """Swap flex attention (the inner attention of every attention block)."""

        feed_forward: bool = True
        """Swap the SwiGLU feed-forwards whose w1 and w3 are plain bias-free Linears."""

    def __init__(self, config: Config, **kwargs):
        self.config = config
        self.swapped: Counter = Counter()

    def convert(self, model_config: Module.Config) -> Module.Config:
        c = self.config
        self.swapped = convert(model_config, norm=c.norm, attention=c.attention, feed_forward=c.feed_forward)
        if not self.swapped and (c.norm or c.attention or c.feed_forward):
            raise ValueError(
                f"TpuKernelsConverter: {type(model_config).__qualname__} has no RMSNorm, flex attention or "
                "SwiGLU feed-forward config to swap; the converter covers torchtitan's Llama 3 and Qwen 3."
            )
        return model_config


__all__ = ["TpuKernelsConverter", "convert"]
