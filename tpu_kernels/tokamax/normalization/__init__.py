"""Normalisation: torch.ops.tokamax.layer_norm (LayerNorm, and RMSNorm with subtract_mean=False) (see `op.py`)."""

from tpu_kernels.tokamax.normalization.op import layer_norm, layer_norm_op, rms_norm
from tpu_kernels.tokamax.registry import register

FAMILY = register(__name__, functions=[layer_norm, rms_norm], ops=[layer_norm_op])

__all__ = ["FAMILY", "layer_norm", "layer_norm_op", "rms_norm"]
