"""Normalisation: torch.ops.tokamax.layer_norm (LayerNorm, and RMSNorm with subtract_mean=False) (see `op.py`)."""

from tpu_kernels.tokamax.normalization import examples, reference, shapes
from tpu_kernels.tokamax.normalization.op import (
    IMPLEMENTATIONS,
    layer_norm,
    layer_norm_op,
    rms_norm,
)
from tpu_kernels.tokamax.registry import Family, register

FAMILY = register(
    Family(
        "normalization",
        functions=(
            layer_norm,
            rms_norm,
        ),
        ops=(layer_norm_op,),
        implementations=IMPLEMENTATIONS,
        reference=reference,
        examples=examples,
        shapes=shapes,
    )
)

__all__ = ["FAMILY", "layer_norm", "layer_norm_op", "rms_norm"]
