"""DeepSeek-V4's RoPE: torch.ops.tokamax.deepseek_rope (Tokamax's `ops.deepseek_rope`).
On TPU the default is Tokamax's Pallas kernel ("mosaic_tpu", which has no VJP: the backward
differentiates XLA) with "xla" as fallback; elsewhere "xla".
"""

from __future__ import annotations

import torch

from tpu_kernels.tokamax import implementation as impl
from tpu_kernels.tokamax.placements import rule, shape
from tpu_kernels.tokamax.rope import reference
from tpu_kernels.tokamax.wrap import call_op, public_op
from tpu_kernels.verification.tolerance import Reference

IMPLEMENTATIONS = (
    impl.table("deepseek_rope", {"mosaic_tpu": impl.TPU_ONLY}, tpu="mosaic_tpu,xla", no_vjp=("mosaic_tpu",)),
)

ROPE_MODES = ("rope", "qnorm_rope")


def deepseek_rope(
    x: torch.Tensor,  # [tokens, head_dim] or [tokens, heads, head_dim]
    positions: torch.Tensor,  # int32 [tokens]
    cos_sin_cache: torch.Tensor,  # float32 [max_pos, rotary_dim]
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
    positions = positions.to(torch.int32)
    return call_op(deepseek_rope_op, locals())


def _rope_outputs(x, *args, **kwargs):
    return torch.empty_like(x)


@rule(
    "tokens: x and positions sharded on dim 0; or heads: x [tokens, heads, head_dim] sharded "
    "on dim 1; cos_sin_cache Replicate"
)
def _sharding(a):
    """Each token turns by its own position (positions shard with it), each head alone
    (qnorm_rope normalises within a head); head_dim pairs channels: not sharded."""
    from torch.distributed.tensor import Shard

    found = [([Shard(0)], {"x": Shard(0), "positions": Shard(0)})]
    if len(shape(a["x"])) == 3:
        found.append(([Shard(1)], {"x": Shard(1)}))
    return found


# Declared as ragged_gather_reduce_op is, option for option (a fake for symbolic sizes, a
# sharding rule, a reference): alike on purpose, each op's own facts.
deepseek_rope_op = public_op(
    deepseek_rope,
    symbolic_fake=_rope_outputs,
    sharding=_sharding,
    # Tokamax rotates in float32 whatever the dtype: a float64 result has float32's tolerance
    check_reference=Reference(reference.deepseek_rope, scale=4, computes_in=torch.float32),
)
