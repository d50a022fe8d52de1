"""DeepSeek-V4's manifold-constrained hyper-connections (mHC): torch.ops.tokamax.mhc_pre, mhc_post
and mhc_fused_post_pre (Tokamax's `ops.mhc_*`), on bfloat16 residual streams. On TPU the default
is Tokamax's Pallas kernel ("mosaic_tpu", which has no VJP: the backward differentiates XLA)
with "xla" as fallback; elsewhere "xla".
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from tpu_kernels.op import KernelOp
from tpu_kernels.tokamax import implementation as impl
from tpu_kernels.tokamax.mhc import reference
from tpu_kernels.tokamax.placements import ByName
from tpu_kernels.tokamax.wrap import call_op, public_op
from tpu_kernels.verification.tolerance import Reference


def _mhc_implementations(op: str, registry: str) -> impl.OpImplementations:
    """Tokamax keeps the three ops' implementations in three registries of one module."""
    kernels = {"mosaic_tpu": impl.TPU_ONLY}
    return impl.table(op, kernels, tpu="mosaic_tpu,xla", api="mhc", registry=registry, no_vjp=("mosaic_tpu",))


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


def _mix_sums(residual):
    return residual.shape[-1]  # the pre step's mix logits each sum M * H products


def _stream_sums(comb_res_mix):
    return comb_res_mix.shape[-1]  # the post step's new streams each sum M weighted streams


def _mhc_op(
    public: Callable, symbolic_fake: Callable, n_outputs: int, grad_scale: float, sums: Callable = _mix_sums
) -> KernelOp:
    """The op behind one of the three public functions: they differ only in their outputs and
    in their tolerances (what each output sums, the gradients' scale; checked mode compares with `reference`'s function of the
    same name). None of the Mosaic kernels has a VJP (the tables say so): the backward
    differentiates XLA."""
    check = Reference(
        getattr(reference, public.__name__),
        reduces=sums,
        grad_reduces=lambda residual: max(residual.shape),  # fn's gradient sums over tokens
        scale=4,
        grad_scale=grad_scale,
        # Tokamax rounds the streams to their dtype (mhc_fused_post_pre: the new residual,
        # before the pre step; float32 outputs 1.4e-3 off for bf16 streams): results are
        # held to the residual's dtype's tolerance
        computes_in=lambda residual: residual.dtype if residual.dtype.itemsize < 4 else torch.float32,
    )
    return public_op(public, symbolic_fake=symbolic_fake, sharding=_tokens(n_outputs), check_reference=check)


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


mhc_pre_op = _mhc_op(mhc_pre, _mhc_pre_outputs, n_outputs=3, grad_scale=40)


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
    return call_op(mhc_post_op, locals())


def _mhc_post_outputs(x, residual, *args, **kwargs):
    return torch.empty_like(residual)


mhc_post_op = _mhc_op(mhc_post, _mhc_post_outputs, n_outputs=1, grad_scale=16, sums=_stream_sums)


# mhc_post's parameters, then mhc_pre's, as Tokamax's fused op takes them (alike on purpose).
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
    return call_op(mhc_fused_post_pre_op, locals())


def _mhc_fused_outputs(x, residual, post_layer_mix, comb_res_mix, fn, *args, **kwargs):
    t, m = residual.shape[0], _mhc_streams(fn)
    return (
        torch.empty_like(residual),
        residual.new_empty((t, m), dtype=torch.float32),
        residual.new_empty((t, m, m), dtype=torch.float32),
        residual.new_empty((t, x.shape[1]), dtype=torch.bfloat16),
    )


mhc_fused_post_pre_op = _mhc_op(mhc_fused_post_pre, _mhc_fused_outputs, n_outputs=4, grad_scale=40)
