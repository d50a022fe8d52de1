"""RMSNorm: torch.ops.tpu_kernels.rmsnorm(x, weight, *, eps=1e-6, block_rows=None).

The op returns (y, inv_rms); calling `rmsnorm(x, w)` returns y alone, and
inv_rms is kept as a residual for the explicit backward kernel
(torch.ops.tpu_kernels.rmsnorm_backward).
"""

import torch

from tpu_kernels.dispatch.buckets import bucket_rows
from tpu_kernels.kernels import registry
from tpu_kernels.kernels._blocks import bf16 as _bf16
from tpu_kernels.kernels.rmsnorm import pallas, reference, shapes
from tpu_kernels.op import tpu_kernel
from tpu_kernels.verification.tolerance import with_ignored


def _examples():
    return [((_bf16(shape), _bf16(shape[-1:])), {}) for shape in shapes.BENCH.values()]


# Rows are normalized independently, so the row dim (-2: the sequence of a (batch, seq,
# hidden) x) is padded to its bucket (bucket_rows' powers_of_two(128): a decode step's
# one row to the dtype's sublane tile, up to 128 rows a power of two, then multiples of
# 128) and sliced back: one executable per bucket (bench/varlen.py). Padded rows are zeros: their inv_rms is rsqrt(eps), finite, and
# their incoming gradients are zero, so they add nothing to weight's gradient. The
# hidden dim is reduced over and is never padded.
# Under torch.autocast it runs in float32 (statistics and output), like CUDA autocast's norms.
rmsnorm = tpu_kernel(
    "tpu_kernels::rmsnorm",
    outputs=("y", "inv_rms"),
    residuals=("inv_rms",),
    examples=_examples,
    autocast="fp32",
    sharding="rowwise",
    check_reference=with_ignored(reference.CHECK, "block_rows"),
    buckets=bucket_rows("x", "y", "inv_rms"),
    tune=pallas.Config.space(),
)(pallas.rmsnorm)
rmsnorm.def_backward(pallas.rmsnorm_backward)


def _torch_rmsnorm(x, w, *, eps=1e-6):
    """The benchmark's baseline: torch's own fused op, not the family's three-op reference."""
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), w, eps)


registry.register(
    __name__,
    op=rmsnorm,
    inputs=lambda shape, dtype, device: (
        registry.randn(shape, dtype, device),
        registry.randn(shape[-1:], dtype, device),
    ),
    helion="rmsnorm_helion",
    baseline=_torch_rmsnorm,
    reduction=lambda shape: shape[-1],  # each row's mean of squares
)

__all__ = ["rmsnorm"]
