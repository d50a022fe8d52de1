"""torchtitan's selective activation checkpointing, with the converted model's costly ops saved.

torchtitan's `SelectiveAC` saves the outputs of the ops it names (flex attention, SDPA, every
second matmul, ...) and recomputes the rest in backward. It does not name the Tokamax ops, so
on a converted model it recomputes the attention (whose flex output it saves on the stock
model) and the fused w1/w3 GLU (two matmuls, one of which it saves on the stock model).
`TpuKernelsSelectiveAC` is the same policy with those two saved: torchtitan's hook for this is a
`SelectiveAC` subclass overriding `get_save_ops`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torchtitan.distributed.activation_checkpoint import SelectiveAC

import tpu_kernels.tokamax  # noqa: F401 - registers torch.ops.tokamax.*


class TpuKernelsSelectiveAC(SelectiveAC):
    """`SelectiveAC` that also saves Tokamax's `dot_product_attention` and `gated_linear_unit`
    outputs; on a stock model (no Tokamax ops) it is `SelectiveAC`. Set it where a trainer
    config takes its activation checkpointing: `activation_checkpoint=TpuKernelsSelectiveAC.Config()`."""

    @dataclass(kw_only=True, slots=True)
    class Config(SelectiveAC.Config):
        pass

    def get_save_ops(self) -> set:
        return super().get_save_ops() | {
            torch.ops.tokamax.dot_product_attention.default,
            torch.ops.tokamax.gated_linear_unit.default,
        }


__all__ = ["TpuKernelsSelectiveAC"]
