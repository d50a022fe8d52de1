"""DeepSeek-V4's manifold-constrained hyper-connections (mHC): torch.ops.tokamax.mhc_pre, mhc_post
and mhc_fused_post_pre (Tokamax's `ops.mhc_*`), on bfloat16 residual streams. On TPU the default
is Tokamax's Pallas kernel ("mosaic_tpu", which has no VJP: the backward differentiates XLA)
with "xla" as fallback; elsewhere "xla".
"""

from __future__ import annotations

import math

import torch
from tokamax import ops

from tpu_kernels.checking import Reference
from tpu_kernels.tokamax import implementation as impl
from tpu_kernels.tokamax import tolerance
from tpu_kernels.tokamax.mhc import reference
from tpu_kernels.tokamax.placements import ByName
from tpu_kernels.tokamax.wrap import call_op, tensors_first, tokamax_op


def _mhc_implementations(op: str, registry: str) -> impl.OpImplementations:
    """Tokamax keeps the three ops' implementations in three registries of one module."""
    kernels = {"xla": impl.EVERYWHERE, "mosaic_tpu": impl.TPU_ONLY}
    return impl.OpImplementations(op, kernels, impl.XLA_ELSEWHERE, impl.SRC + "mhc.api", registry)


IMPLEMENTATIONS = (
    _mhc_implementations("mhc_pre", "PRE_IMPLEMENTATIONS"),
    _mhc_implementations("mhc_post", "POST_IMPLEMENTATIONS"),
    _mhc_implementations("mhc_fused_post_pre", "FUSED_POST_PRE_IMPLEMENTATIONS"),
)

_TOKENS = ("x", "residual", "post_layer_mix", "comb_res_mix")


def _tokens(n_outputs: int) -> ByName:
    """Tokens: every per-token tensor and every output sharded on dim 0; the mixing weights
    (fn, hc_scale, hc_base) Replicate, their gradients Partial (derived). Each token mixes
    only its own M streams."""

    def strategies(a):
        from torch.distributed.tensor import Shard

        return [([Shard(0)] * n_outputs, dict.fromkeys(_TOKENS, Shard(0)))]

    return ByName(
        strategies,
        "tokens: every per-token tensor and every output sharded on dim 0; the mixing weights "
        "(fn, hc_scale, hc_base) Replicate",
    )


# Each op's parameters are its public function's (tensors positional, the constants
# keyword-only: `tensors_first`), and its body calls Tokamax's with them by name. None of
# the Mosaic kernels has a VJP: the backward differentiates XLA.


def mhc_pre(
    residual: torch.Tensor,  # bfloat16 [T, M*H]
    fn: torch.Tensor,  # float32 [M*(M+2), M*H]
    hc_scale: torch.Tensor,  # float32 [3]
    hc_base: torch.Tensor,  # float32 [M*(M+2)]
    rms_eps: float,
    hc_pre_eps: float,
    hc_sinkhorn_eps: float,
    hc_post_mult_value: float,
    sinkhorn_repeat: int,
    *,
    implementation: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """mHC step before a sublayer (Tokamax's `ops.mhc_pre`): gates from the M residual streams,
    and the streams collapsed into the sublayer input.

    Args:
      residual: bfloat16 [T, M*H] (Tokamax requires bfloat16).
      fn: float32 [M*(M+2), M*H]; hc_scale: float32 [3]; hc_base: float32 [M*(M+2)].

    Returns:
      (post_mix float32 [T, M], comb_mix float32 [T, M, M], layer_input bfloat16 [T, H]).
    """
    implementation = impl.resolve_implementation("mhc_pre", residual.device, implementation)
    return call_op(mhc_pre_op, locals())


def _mhc_streams(fn: torch.Tensor) -> int:
    """M from fn's M*(M+2) rows (this specialises a symbolic row count to its value)."""
    return math.isqrt(int(fn.shape[0]) + 1) - 1


def _mhc_pre_outputs(residual, fn, hc_scale, hc_base, **kwargs):
    t, m = residual.shape[0], _mhc_streams(fn)
    return (
        residual.new_empty((t, m), dtype=torch.float32),
        residual.new_empty((t, m, m), dtype=torch.float32),
        residual.new_empty((t, residual.shape[1] // m), dtype=torch.bfloat16),
    )


mhc_pre_op = tokamax_op(
    "tokamax::mhc_pre",
    calls=ops.mhc_pre,
    signature=tensors_first(mhc_pre),
    no_vjp=("mosaic_tpu",),
    symbolic_fake=_mhc_pre_outputs,
    sharding=_tokens(3),
    check_reference=Reference(reference.mhc_pre, scale=4, grad_scale=40, ignore=tolerance.IGNORE),
)


def mhc_post(
    x: torch.Tensor,  # bfloat16 [T, H]
    residual: torch.Tensor,  # bfloat16 [T, M*H]
    post_layer_mix: torch.Tensor,  # float32 [T, M]
    comb_res_mix: torch.Tensor,  # float32 [T, M, M]
    *,
    implementation: str | None = None,
) -> torch.Tensor:
    """mHC step after a sublayer (Tokamax's `ops.mhc_post`):
    new_residual[j] = post_layer_mix[j] * x + sum_i comb_res_mix[i, j] * residual[i].

    Args:
      x: bfloat16 [T, H]; residual: bfloat16 [T, M*H];
      post_layer_mix: float32 [T, M]; comb_res_mix: float32 [T, M, M].

    Returns:
      bfloat16 [T, M*H].
    """
    implementation = impl.resolve_implementation("mhc_post", x.device, implementation)
    return call_op(mhc_post_op, locals())


def _mhc_post_outputs(x, residual, *args, **kwargs):
    return torch.empty_like(residual)


mhc_post_op = tokamax_op(
    "tokamax::mhc_post",
    calls=ops.mhc_post,
    signature=mhc_post,
    no_vjp=("mosaic_tpu",),
    symbolic_fake=_mhc_post_outputs,
    sharding=_tokens(1),
    check_reference=Reference(reference.mhc_post, scale=4, grad_scale=16, ignore=tolerance.IGNORE),
)


def mhc_fused_post_pre(
    x: torch.Tensor,
    residual: torch.Tensor,
    post_layer_mix: torch.Tensor,
    comb_res_mix: torch.Tensor,
    fn: torch.Tensor,
    hc_scale: torch.Tensor,
    hc_base: torch.Tensor,
    rms_eps: float,
    hc_pre_eps: float,
    hc_sinkhorn_eps: float,
    hc_post_mult_value: float,
    sinkhorn_repeat: int,
    *,
    implementation: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """mhc_post, then the next sublayer's mhc_pre (Tokamax's `ops.mhc_fused_post_pre`).

    Returns:
      (residual [T, M*H], post_mix [T, M], comb_mix [T, M, M], layer_input [T, H]).
    """
    implementation = impl.resolve_implementation("mhc_fused_post_pre", x.device, implementation)
    return call_op(mhc_fused_post_pre_op, locals())


def _mhc_fused_outputs(x, residual, post_layer_mix, comb_res_mix, fn, *args, **kwargs):
    t, m = residual.shape[0], _mhc_streams(fn)
    return (
        torch.empty_like(residual),
        residual.new_empty((t, m), dtype=torch.float32),
        residual.new_empty((t, m, m), dtype=torch.float32),
        residual.new_empty((t, x.shape[1]), dtype=torch.bfloat16),
    )


mhc_fused_post_pre_op = tokamax_op(
    "tokamax::mhc_fused_post_pre",
    calls=ops.mhc_fused_post_pre,
    signature=tensors_first(mhc_fused_post_pre),
    no_vjp=("mosaic_tpu",),
    symbolic_fake=_mhc_fused_outputs,
    sharding=_tokens(4),
    check_reference=Reference(reference.mhc_fused_post_pre, scale=4, grad_scale=40, ignore=tolerance.IGNORE),
)
