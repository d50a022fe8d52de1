"""Triangle multiplication (AlphaFold 2, Algorithms 11 and 12): torch.ops.tokamax.triangle_multiplication.

For a pair representation x [N, N, C] (no batch dimension), with LayerNorms
over channels and GLUs whose [C, 2, H] weights hold the left ([:, 0]) and
right ([:, 1]) projections:

    xn    = layer_norm(x) * ln_in_scale + ln_in_offset
    a     = sigmoid(xn @ gate_in) * (xn @ projection_in) * mask      # [N, N, 2, H]
    left, right = a[..., 0, :], a[..., 1, :]
    "outgoing": act[i, j] = sum_k left[i, k] * right[j, k]
    "incoming": act[i, j] = sum_k left[k, j] * right[k, i]
    out   = (layer_norm(act) * ln_out_scale + ln_out_offset) @ projection_out
            * sigmoid(xn @ gate_out)                                  # [N, N, D]
"""

from __future__ import annotations

import jax
import tokamax
import torch

from tpu_kernels.tokamax.implementation import (
    ACCELERATORS,
    CPU,
    CUDA,
    EVERYWHERE,
    GPU_ONLY,
    SRC,
    TPU,
    OpImplementations,
    resolve_implementation,
    tokamax_implementation,
)
from tpu_kernels.tokamax.triangle import examples
from tpu_kernels.tokamax.wrap import tokamax_op

IMPLEMENTATIONS = (
    OpImplementations(
        "triangle_multiplication",
        {"xla": EVERYWHERE, "triton": GPU_ONLY, "mosaic": ACCELERATORS},
        {CPU: "xla", CUDA: "xla", TPU: "xla"},
        SRC + "triangle_multiplication.api",
    ),
)

TRIANGLE_TYPES = ("outgoing", "incoming")


def _triangle_outputs(x, mask, projection_in_weights, gate_in_weights, projection_out_weights, *a, **k):
    return x.new_empty((x.shape[0], x.shape[1], projection_out_weights.shape[-1]))


@tokamax_op(
    "tokamax::triangle_multiplication",
    examples=examples.triangle_multiplication,
    symbolic_fake=_triangle_outputs,
)
def _triangle_multiplication(
    x: jax.Array,  # [N, N, C]
    mask: jax.Array,  # bool [N, N]
    projection_in_weights: jax.Array,  # [C, 2, H]
    gate_in_weights: jax.Array,  # [C, 2, H]
    projection_out_weights: jax.Array,  # [H, D]
    gate_out_weights: jax.Array,  # [C, D]
    layernorm_in_scale: jax.Array,  # [C]
    layernorm_in_offset: jax.Array,  # [C]
    layernorm_out_scale: jax.Array,  # [H]
    layernorm_out_offset: jax.Array,  # [H]
    triangle_type: str,
    *,
    eps: float = 1e-6,
    precision: str | None = None,
    implementation: str | None = None,
) -> jax.Array:
    return tokamax.triangle_multiplication(
        x,
        mask,
        projection_in_weights,
        gate_in_weights,
        projection_out_weights,
        gate_out_weights,
        layernorm_in_scale,
        layernorm_in_offset,
        layernorm_out_scale,
        layernorm_out_offset,
        triangle_type,
        precision=precision,
        epsilon=eps,
        implementation=tokamax_implementation(implementation),
    )


def triangle_multiplication(
    x: torch.Tensor,
    mask: torch.Tensor,
    projection_in_weights: torch.Tensor,
    gate_in_weights: torch.Tensor,
    projection_out_weights: torch.Tensor,
    gate_out_weights: torch.Tensor,
    layernorm_in_scale: torch.Tensor,
    layernorm_in_offset: torch.Tensor,
    layernorm_out_scale: torch.Tensor,
    layernorm_out_offset: torch.Tensor,
    triangle_type: str,
    *,
    eps: float = 1e-6,
    precision: str | None = None,
    implementation: str | None = None,
) -> torch.Tensor:
    """Triangle multiplicative update (Tokamax's `triangle_multiplication`).

    Args:
      x: [N, N, C] pair representation.
      mask: bool [N, N] (True = keep); masked pairs add nothing to the products.
      projection_in_weights, gate_in_weights: [C, 2, H] (left, right).
      projection_out_weights: [H, D]; gate_out_weights: [C, D].
      layernorm_in_scale, layernorm_in_offset: [C]; layernorm_out_*: [H].
      triangle_type: "outgoing" or "incoming".
      implementation: "xla" (the only one Tokamax 0.0.17 has); None chooses by device.

    Returns:
      [N, N, D] in x's dtype.
    """
    if triangle_type not in TRIANGLE_TYPES:
        raise ValueError(
            f"tokamax.triangle_multiplication: triangle_type={triangle_type!r}; use 'outgoing' or 'incoming'."
        )
    if x.ndim != 3 or x.shape[0] != x.shape[1] or tuple(mask.shape) != tuple(x.shape[:2]):
        raise ValueError(
            "tokamax.triangle_multiplication: needs x [N, N, C] and mask [N, N] (no batch dimension); "
            f"got {tuple(x.shape)} and {tuple(mask.shape)}."
        )
    if mask.dtype != torch.bool:
        mask = mask != 0
    return _triangle_multiplication(
        x,
        mask,
        projection_in_weights,
        gate_in_weights,
        projection_out_weights,
        gate_out_weights,
        layernorm_in_scale,
        layernorm_in_offset,
        layernorm_out_scale,
        layernorm_out_offset,
        triangle_type,
        eps=eps,
        precision=precision,
        implementation=resolve_implementation("triangle_multiplication", x.device, implementation),
    )


triangle_multiplication_op = _triangle_multiplication

__all__ = [
    "IMPLEMENTATIONS",
    "TRIANGLE_TYPES",
    "triangle_multiplication",
    "triangle_multiplication_op",
]
