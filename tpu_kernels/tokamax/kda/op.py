"""Kimi delta attention: torch.ops.tokamax.kimi_delta_attention (Tokamax's `ops.kimi_delta_attention`),
a gated delta-rule linear attention in Tokamax's heads-first layout. On TPU the default is
Tokamax's Pallas kernel ("mosaic", TPU only here) with "xla" as fallback; elsewhere "xla".
"""

from __future__ import annotations

import functools

import torch
from tokamax import ops

from tpu_kernels.tokamax import implementation as impl
from tpu_kernels.tokamax.kda import reference
from tpu_kernels.tokamax.placements import mesh_size, rule, shape
from tpu_kernels.tokamax.wrap import call_op, public_op
from tpu_kernels.verification.tolerance import Reference

# "mosaic" here is a TPU kernel only.
IMPLEMENTATIONS = (
    impl.table(
        "kimi_delta_attention",
        {"xla_chunked": impl.EVERYWHERE, "mosaic": impl.TPU_ONLY},
        tpu="mosaic,xla",
        api="kda",
    ),
)


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


# Named and ordered as dot_product_attention's parameters (query, key, value first; optional
# tensors and scale after): alike on purpose.
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
    segment_ids = None if segment_ids is None else segment_ids.to(torch.int32)
    return call_op(kimi_delta_attention_op, locals())


@rule(
    "batch: query, key, value, gate, beta on dim 1, initial_state and segment_ids on dim 0 "
    "(outputs: dim 1, dim 0) when every rank gets a batch entry; or heads: the same tensors "
    "on their heads dim (a_log, delta_time_bias, initial_state too) when the heads split "
    "evenly over the mesh"
)
def _sharding(a):
    """The recurrence runs per (head, batch) over time: time is not shardable. a_log [H] and
    delta_time_bias [H*K] are per head; DTensor's chunks of H*K line up with those of H only
    when H divides evenly, so heads are offered then only. Tokamax's kernel fails on an empty
    batch ("index is out of bounds for axis 0 with size 0"), which DTensor's chunks give a
    rank when the batch is short (4 entries on 3 ranks: 2, 2, 0; found by the sharding
    simulation), so the batch is offered only when no rank's chunk is empty."""
    from torch.distributed.tensor import Shard

    per_step = ("query", "key", "value", "gate", "beta")
    batch = dict.fromkeys(per_step, Shard(1)) | {"initial_state": Shard(0), "segment_ids": Shard(0)}
    n, b = mesh_size(a), shape(a["query"])[1]
    found = [([Shard(1), Shard(0)], batch)] if -(-b // n) * (n - 1) < b else []
    if shape(a["query"])[0] % mesh_size(a) == 0:
        heads = dict.fromkeys(per_step + ("a_log", "delta_time_bias"), Shard(0))
        heads["initial_state"] = Shard(2)
        found.append(([Shard(0), Shard(2)], heads))
    return found


# The op asks Tokamax for the final state too.
kimi_delta_attention_op = public_op(
    kimi_delta_attention,
    calls=functools.partial(ops.kimi_delta_attention, output_final_state=True),
    symbolic_fake=_kda_outputs,
    sharding=_sharding,
    check_reference=Reference(
        reference.kimi_delta_attention,
        # [H, B, T, K]: each step's dot sums K terms; the state sums T steps' updates
        reduces=lambda query: max(query.shape[-1], query.shape[-2]),
        scale=4,
        grad_scale=8,
    ),
)
