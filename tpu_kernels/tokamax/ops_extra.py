"""Ops under `tokamax.ops` that run off-TPU (through their "xla" implementation) as torch ops.

Mixture-of-experts routing and combine, DeepSeek-V4's RoPE and hyper-connections
(mHC), and Kimi delta attention. Each keeps Tokamax's argument names, order and
layouts. On TPU the default is Tokamax's Pallas kernel ("mosaic_tpu"/"mosaic")
with "xla" as fallback; elsewhere "xla". docs/tokamax.md lists the
`tokamax.ops` kernels that are TPU serving kernels and not wrapped here.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import torch
from tokamax import ops

from tpu_kernels.tokamax import examples
from tpu_kernels.tokamax.implementation import resolve_implementation, tokamax_implementation
from tpu_kernels.tokamax.wrap import tokamax_op

# ---- MoE routing: top_k, router_topk (selections: no gradient) -------------------------------


# Shape rules for symbolic sizes (Tokamax's checks compare sizes with Python ints, which
# symbolic sizes cannot answer); tests/tokamax/test_fakes.py checks them against the
# fakes jax.eval_shape derives.
def _top_k_outputs(scores, row_lengths=None, *, k, **kwargs):
    shape = (scores.shape[0], k)
    return scores.new_empty(shape, dtype=torch.int32), scores.new_empty(shape, dtype=torch.float32)


@tokamax_op("tokamax::top_k", examples=examples.top_k, backward=None, symbolic_fake=_top_k_outputs)
def _top_k(
    scores: jax.Array,  # float32 [b, n]
    row_lengths: jax.Array | None = None,  # int32 [b]
    *,
    k: int,
    implementation: str | None = None,
) -> tuple[jax.Array, jax.Array]:
    indices, bits = ops.top_k(
        scores, k, row_lengths, return_scores=True, implementation=tokamax_implementation(implementation)
    )
    return indices, jax.lax.bitcast_convert_type(bits, jnp.float32)


def top_k(
    scores: torch.Tensor,
    k: int,
    row_lengths: torch.Tensor | None = None,
    *,
    implementation: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact top-k per row (Tokamax's `ops.top_k`).

    Args:
      scores: float32 [b, n].
      k: entries per row.
      row_lengths: int [b]; only the first row_lengths[i] columns of row i compete.

    Returns:
      (indices int32 [b, k], values float32 [b, k]), best first; where a row has
      fewer than k eligible entries the index is -1 and the value -inf. (torch.topk
      returns (values, indices).)
    """
    if scores.ndim != 2 or scores.dtype != torch.float32:
        raise ValueError(
            f"tokamax.top_k: scores must be float32 [b, n], got {scores.dtype} {tuple(scores.shape)}."
        )
    lengths = None if row_lengths is None else row_lengths.to(torch.int32)
    return _top_k(
        scores, lengths, k=k, implementation=resolve_implementation("top_k", scores.device, implementation)
    )


def _router_topk_outputs(scores, *, k, **kwargs):
    shape = (scores.shape[0], k)
    return scores.new_empty(shape, dtype=torch.float32), scores.new_empty(shape, dtype=torch.int32)


@tokamax_op(
    "tokamax::router_topk", examples=examples.router_topk, backward=None, symbolic_fake=_router_topk_outputs
)
def _router_topk(
    scores: jax.Array, *, k: int, implementation: str | None = None
) -> tuple[jax.Array, jax.Array]:
    out = ops.router_topk(scores, k, implementation=tokamax_implementation(implementation))
    return tuple(out)


def router_topk(
    scores: torch.Tensor, k: int, *, implementation: str | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The top k experts of each token without a sort (Tokamax's `ops.router_topk`).

    Args:
      scores: [tokens, experts], float32, bfloat16 or float16.

    Returns:
      (weights float32 [tokens, k], descending; indices int32 [tokens, k]). Ties
      go to the lowest expert id. The weights are the selected scores (no
      softmax) and carry no gradient: for a differentiable gate use
      `scores.gather(1, indices.long())`.
    """
    return _router_topk(
        scores, k=k, implementation=resolve_implementation("router_topk", scores.device, implementation)
    )


# ---- MoE gather and combine ------------------------------------------------------------------


@tokamax_op("tokamax::ragged_gather", examples=examples.ragged_gather, no_vjp=("mosaic",))
def _ragged_gather(
    x: jax.Array,  # [in_size, hidden]
    indices: jax.Array,  # int32 [out_size]
    start: jax.Array,  # int32 [1]
    end: jax.Array,  # int32 [1]
    *,
    implementation: str | None = None,
) -> jax.Array:
    return ops.ragged_gather(x, indices, start, end, implementation=tokamax_implementation(implementation))


def ragged_gather(
    x: torch.Tensor,
    indices: torch.Tensor,
    start: torch.Tensor,
    end: torch.Tensor,
    *,
    implementation: str | None = None,
) -> torch.Tensor:
    """x[indices] (Tokamax's `ops.ragged_gather`): x [in_size, hidden], indices int [out_size].

    start and end (int [1]) bound the rows the TPU kernel fills; the "xla"
    implementation gathers every row. Gradient: with respect to x.
    """
    as_i32 = [t.to(torch.int32) for t in (indices, start, end)]
    return _ragged_gather(
        x, *as_i32, implementation=resolve_implementation("ragged_gather", x.device, implementation)
    )


def _gather_reduce_outputs(x, indices, topk_weights, valid_rows_mask, *, reduce_group_size, **kwargs):
    return x.new_empty((indices.shape[0] // reduce_group_size, x.shape[1]))


@tokamax_op(
    "tokamax::ragged_gather_reduce",
    examples=examples.ragged_gather_reduce,
    no_vjp=("mosaic_tpu",),
    symbolic_fake=_gather_reduce_outputs,
)
def _ragged_gather_reduce(
    x: jax.Array,  # [num_rows, hidden]
    indices: jax.Array,  # int32 [routes]
    topk_weights: jax.Array,  # [routes]
    valid_rows_mask: jax.Array,  # bool [routes]
    *,
    reduce_group_size: int,
    implementation: str | None = None,
) -> jax.Array:
    return ops.ragged_gather_reduce(
        x,
        indices,
        topk_weights,
        valid_rows_mask,
        reduce_group_size,
        implementation=tokamax_implementation(implementation),
    )


def ragged_gather_reduce(
    x: torch.Tensor,
    indices: torch.Tensor,
    topk_weights: torch.Tensor,
    valid_rows_mask: torch.Tensor,
    reduce_group_size: int,
    *,
    implementation: str | None = None,
) -> torch.Tensor:
    """The MoE combine (Tokamax's `ops.ragged_gather_reduce`).

    out[t] = sum over routes r in [t*G, (t+1)*G) with valid_rows_mask[r] of
    topk_weights[r] * x[indices[r]], accumulated in float32; G = reduce_group_size.

    Args:
      x: [num_rows, hidden] expert outputs.
      indices: int [routes]; topk_weights: [routes]; valid_rows_mask: bool [routes].
      reduce_group_size: routes per token (the MoE top-k); divides routes.

    Returns:
      [routes // G, hidden] in x's dtype. Gradients: x and topk_weights.
    """
    if indices.shape[0] % reduce_group_size:
        raise ValueError(
            f"tokamax.ragged_gather_reduce: routes ({indices.shape[0]}) must be a multiple of "
            f"reduce_group_size ({reduce_group_size})."
        )
    return _ragged_gather_reduce(
        x,
        indices.to(torch.int32),
        topk_weights,
        valid_rows_mask.bool(),
        reduce_group_size=reduce_group_size,
        implementation=resolve_implementation("ragged_gather_reduce", x.device, implementation),
    )


# ---- DeepSeek-V4 RoPE ------------------------------------------------------------------------

ROPE_MODES = ("rope", "qnorm_rope")


def _rope_outputs(x, *args, **kwargs):
    return torch.empty_like(x)


@tokamax_op(
    "tokamax::deepseek_rope",
    examples=examples.deepseek_rope,
    no_vjp=("mosaic_tpu",),
    symbolic_fake=_rope_outputs,
)
def _deepseek_rope(
    x: jax.Array,  # [tokens, head_dim] or [tokens, heads, head_dim]
    positions: jax.Array,  # int32 [tokens]
    cos_sin_cache: jax.Array,  # float32 [max_pos, rotary_dim]
    *,
    mode: str = "rope",
    inverse: bool = False,
    eps: float = 1e-6,
    implementation: str | None = None,
) -> jax.Array:
    return ops.deepseek_rope(
        x,
        positions,
        cos_sin_cache,
        mode=mode,
        inverse=inverse,
        eps=eps,
        implementation=tokamax_implementation(implementation),
    )


def deepseek_rope(
    x: torch.Tensor,
    positions: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    *,
    mode: str = "rope",
    inverse: bool = False,
    eps: float = 1e-6,
    implementation: str | None = None,
) -> torch.Tensor:
    """DeepSeek-V4's RoPE on the trailing rotary_dim channels (Tokamax's `ops.deepseek_rope`).

    GPT-J (interleaved) rotation: channel pair (2i, 2i+1) turns by frequency i,
    with row positions[t] of cos_sin_cache = [cos | sin]. mode="qnorm_rope"
    first RMS-normalises each head (no weight). Computed in float32.

    Args:
      x: [tokens, head_dim] or [tokens, heads, head_dim]; head_dim a multiple of 128.
      positions: int [tokens]; cos_sin_cache: float32 [max_pos, rotary_dim <= 128].
      mode: "rope" or "qnorm_rope" ("rope_quant" is not wrapped: use the generic path).
      inverse: the transposed rotation.

    Returns:
      x's shape and dtype. Gradient: with respect to x.
    """
    if mode not in ROPE_MODES:
        raise ValueError(f"tokamax.deepseek_rope: mode={mode!r}; use one of {ROPE_MODES}.")
    return _deepseek_rope(
        x,
        positions.to(torch.int32),
        cos_sin_cache,
        mode=mode,
        inverse=inverse,
        eps=eps,
        implementation=resolve_implementation("deepseek_rope", x.device, implementation),
    )


# ---- DeepSeek-V4 manifold-constrained hyper-connections (mHC) --------------------------------


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


@tokamax_op(
    "tokamax::mhc_pre", examples=examples.mhc_pre, no_vjp=("mosaic_tpu",), symbolic_fake=_mhc_pre_outputs
)
def _mhc_pre(
    residual: jax.Array,  # bfloat16 [T, M*H]
    fn: jax.Array,  # float32 [M*(M+2), M*H]
    hc_scale: jax.Array,  # float32 [3]
    hc_base: jax.Array,  # float32 [M*(M+2)]
    *,
    rms_eps: float,
    hc_pre_eps: float,
    hc_sinkhorn_eps: float,
    hc_post_mult_value: float,
    sinkhorn_repeat: int,
    implementation: str | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    return tuple(
        ops.mhc_pre(
            residual,
            fn,
            hc_scale,
            hc_base,
            rms_eps,
            hc_pre_eps,
            hc_sinkhorn_eps,
            hc_post_mult_value,
            sinkhorn_repeat,
            implementation=tokamax_implementation(implementation),
        )
    )


def mhc_pre(
    residual: torch.Tensor,
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
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """mHC step before a sublayer (Tokamax's `ops.mhc_pre`): gates from the M residual streams,
    and the streams collapsed into the sublayer input.

    Args:
      residual: bfloat16 [T, M*H] (Tokamax requires bfloat16).
      fn: float32 [M*(M+2), M*H]; hc_scale: float32 [3]; hc_base: float32 [M*(M+2)].

    Returns:
      (post_mix float32 [T, M], comb_mix float32 [T, M, M], layer_input bfloat16 [T, H]).
    """
    return _mhc_pre(
        residual,
        fn,
        hc_scale,
        hc_base,
        rms_eps=rms_eps,
        hc_pre_eps=hc_pre_eps,
        hc_sinkhorn_eps=hc_sinkhorn_eps,
        hc_post_mult_value=hc_post_mult_value,
        sinkhorn_repeat=sinkhorn_repeat,
        implementation=resolve_implementation("mhc_pre", residual.device, implementation),
    )


def _mhc_post_outputs(x, residual, *args, **kwargs):
    return torch.empty_like(residual)


@tokamax_op(
    "tokamax::mhc_post", examples=examples.mhc_post, no_vjp=("mosaic_tpu",), symbolic_fake=_mhc_post_outputs
)
def _mhc_post(
    x: jax.Array,  # bfloat16 [T, H]
    residual: jax.Array,  # bfloat16 [T, M*H]
    post_layer_mix: jax.Array,  # float32 [T, M]
    comb_res_mix: jax.Array,  # float32 [T, M, M]
    *,
    implementation: str | None = None,
) -> jax.Array:
    return ops.mhc_post(
        x, residual, post_layer_mix, comb_res_mix, implementation=tokamax_implementation(implementation)
    )


def mhc_post(
    x: torch.Tensor,
    residual: torch.Tensor,
    post_layer_mix: torch.Tensor,
    comb_res_mix: torch.Tensor,
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
    return _mhc_post(
        x,
        residual,
        post_layer_mix,
        comb_res_mix,
        implementation=resolve_implementation("mhc_post", x.device, implementation),
    )


def _mhc_fused_outputs(x, residual, post_layer_mix, comb_res_mix, fn, *args, **kwargs):
    t, m = residual.shape[0], _mhc_streams(fn)
    return (
        torch.empty_like(residual),
        residual.new_empty((t, m), dtype=torch.float32),
        residual.new_empty((t, m, m), dtype=torch.float32),
        residual.new_empty((t, x.shape[1]), dtype=torch.bfloat16),
    )


@tokamax_op(
    "tokamax::mhc_fused_post_pre",
    examples=examples.mhc_fused_post_pre,
    no_vjp=("mosaic_tpu",),
    symbolic_fake=_mhc_fused_outputs,
)
def _mhc_fused_post_pre(
    x: jax.Array,
    residual: jax.Array,
    post_layer_mix: jax.Array,
    comb_res_mix: jax.Array,
    fn: jax.Array,
    hc_scale: jax.Array,
    hc_base: jax.Array,
    *,
    rms_eps: float,
    hc_pre_eps: float,
    hc_sinkhorn_eps: float,
    hc_post_mult_value: float,
    sinkhorn_repeat: int,
    implementation: str | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    return tuple(
        ops.mhc_fused_post_pre(
            x,
            residual,
            post_layer_mix,
            comb_res_mix,
            fn,
            hc_scale,
            hc_base,
            rms_eps,
            hc_pre_eps,
            hc_sinkhorn_eps,
            hc_post_mult_value,
            sinkhorn_repeat,
            implementation=tokamax_implementation(implementation),
        )
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
    return _mhc_fused_post_pre(
        x,
        residual,
        post_layer_mix,
        comb_res_mix,
        fn,
        hc_scale,
        hc_base,
        rms_eps=rms_eps,
        hc_pre_eps=hc_pre_eps,
        hc_sinkhorn_eps=hc_sinkhorn_eps,
        hc_post_mult_value=hc_post_mult_value,
        sinkhorn_repeat=sinkhorn_repeat,
        implementation=resolve_implementation("mhc_fused_post_pre", x.device, implementation),
    )


# ---- Kimi delta attention --------------------------------------------------------------------


def _kda_outputs(
    query,
    key,
    value,
    gate,
    beta,
    a_log=None,
    delta_time_bias=None,
    initial_state=None,
    segment_ids=None,
    *,
    max_num_segments=None,
    **kwargs,
):
    h, b, t, k = query.shape
    if initial_state is not None:
        n = initial_state.shape[1]
    else:
        n = 1 if segment_ids is None else max_num_segments
    state_dtype = torch.promote_types(query.dtype, torch.float32)
    return (
        query.new_empty((h, b, t, value.shape[-1])),
        query.new_empty((b, n, h, k, value.shape[-1]), dtype=state_dtype),
    )


@tokamax_op(
    "tokamax::kimi_delta_attention", examples=examples.kimi_delta_attention, symbolic_fake=_kda_outputs
)
def _kimi_delta_attention(
    query: jax.Array,  # [H, B, T, K]
    key: jax.Array,  # [H, B, T, K]
    value: jax.Array,  # [H, B, T, V]
    gate: jax.Array,  # [H, B, T, K]
    beta: jax.Array,  # [H, B, T]
    a_log: jax.Array | None = None,  # [H]
    delta_time_bias: jax.Array | None = None,  # [H*K]
    initial_state: jax.Array | None = None,  # [B, N, H, K, V]
    segment_ids: jax.Array | None = None,  # int32 [B, T]
    *,
    scale: float | None = None,
    use_qk_l2norm: bool = False,
    use_gate_in_kernel: bool = False,
    lower_bound: float | None = None,
    max_num_segments: int | None = None,
    implementation: str | None = None,
) -> tuple[jax.Array, jax.Array]:
    out, state = ops.kimi_delta_attention(
        query,
        key,
        value,
        gate,
        beta,
        a_log=a_log,
        delta_time_bias=delta_time_bias,
        scale=scale,
        initial_state=initial_state,
        output_final_state=True,
        use_qk_l2norm=use_qk_l2norm,
        use_gate_in_kernel=use_gate_in_kernel,
        segment_ids=segment_ids,
        lower_bound=lower_bound,
        max_num_segments=max_num_segments,
        implementation=tokamax_implementation(implementation),
    )
    return out, state


def kimi_delta_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    gate: torch.Tensor,
    beta: torch.Tensor,
    *,
    a_log: torch.Tensor | None = None,
    delta_time_bias: torch.Tensor | None = None,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    use_qk_l2norm: bool = False,
    use_gate_in_kernel: bool = False,
    segment_ids: torch.Tensor | None = None,
    lower_bound: float | None = None,
    max_num_segments: int | None = None,
    implementation: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Kimi delta attention, a gated delta-rule linear attention (Tokamax's `ops.kimi_delta_attention`).

    Per head and batch, over time t, with state S [K, V]:
        S = S * exp(gate_t)[:, None];  S += beta_t * k_t (v_t - k_t S)^T;  out_t = scale * q_t S

    Args:
      query, key: [H, B, T, K] (heads first, Tokamax's layout); value: [H, B, T, V].
      gate: [H, B, T, K], log-space decay (or the raw input with use_gate_in_kernel).
      beta: [H, B, T], the delta-rule learning rate in [0, 1].
      a_log [H], delta_time_bias [H*K], lower_bound: the gate activation (use_gate_in_kernel).
      initial_state: [B, N, H, K, V]; segment_ids: int [B, T] (1-based, 0 = padding).
      implementation: "xla" (the recurrence), "xla_chunked" (needs use_gate_in_kernel
        and lower_bound), "mosaic" (TPU); None chooses by device.

    Returns:
      (output [H, B, T, V] in query's dtype, final_state [B, N, H, K, V] float32 or wider).
      Gradients: every floating input.
    """
    return _kimi_delta_attention(
        query,
        key,
        value,
        gate,
        beta,
        a_log,
        delta_time_bias,
        initial_state,
        None if segment_ids is None else segment_ids.to(torch.int32),
        scale=scale,
        use_qk_l2norm=use_qk_l2norm,
        use_gate_in_kernel=use_gate_in_kernel,
        lower_bound=lower_bound,
        max_num_segments=max_num_segments,
        implementation=resolve_implementation("kimi_delta_attention", query.device, implementation),
    )


top_k_op = _top_k
router_topk_op = _router_topk
ragged_gather_op = _ragged_gather
ragged_gather_reduce_op = _ragged_gather_reduce
deepseek_rope_op = _deepseek_rope
mhc_pre_op = _mhc_pre
mhc_post_op = _mhc_post
mhc_fused_post_pre_op = _mhc_fused_post_pre
kimi_delta_attention_op = _kimi_delta_attention

__all__ = [
    "deepseek_rope",
    "kimi_delta_attention",
    "mhc_fused_post_pre",
    "mhc_post",
    "mhc_pre",
    "ragged_gather",
    "ragged_gather_reduce",
    "router_topk",
    "top_k",
]
