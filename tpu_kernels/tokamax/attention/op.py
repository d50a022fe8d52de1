"""Attention: torch.ops.tokamax.dot_product_attention, in Tokamax's layout or torch's.

Tokamax's layout is [batch, seq, heads, head_dim] ("BTNH"), the layout a
projection `x @ Wq` reshaped to heads gives without a transpose.
`torch.nn.functional.scaled_dot_product_attention` takes [batch, heads, seq,
head_dim] ("BNTH"); pass `layout="BNTH"` or call `scaled_dot_product_attention`
here, which takes F.scaled_dot_product_attention's arguments.

Masking: `mask` is boolean, True = attend (as in F.sdpa); `bias` is added to
the scaled logits; both broadcast to [batch, heads, seq_q, seq_kv]. Causal
masking is top-left aligned (query i sees keys 0..i) also when seq_q != seq_kv,
as in F.sdpa. A query row with no key to attend to (fully masked, or beyond
`query_seq_lengths`) is *not* NaN or zero: Tokamax fills masked logits with the
dtype's most negative finite value, so that row is the mean of `value` over all
keys, and its gradient is zero.
"""

from __future__ import annotations

import jax
import tokamax
import torch

from tpu_kernels.tokamax import implementation as impl
from tpu_kernels.tokamax.attention import reference
from tpu_kernels.tokamax.placements import is_spec, mesh_size, rule, shape
from tpu_kernels.tokamax.wrap import call_op, tokamax_op
from tpu_kernels.verification.tolerance import Reference, rms

LAYOUTS = ("BTNH", "BNTH")

IMPLEMENTATIONS = (
    impl.table(
        "dot_product_attention",
        {**impl.MOSAIC_BOTH, "xla_chunked": impl.EVERYWHERE, "triton": impl.GPU_ONLY, "cudnn": impl.GPU_ONLY},
        cuda="mosaic,triton,xla",
        tpu="mosaic,xla",
        api="attention",
    ),
)


def _attention_outputs(query, key, value, *args, **kwargs) -> torch.Tensor:
    """Output shape for symbolic sizes: the query's, with the value's head dim."""
    return query.new_empty((*query.shape[:-1], value.shape[-1]))


def _call_tokamax(*, local_window_size, **kwargs):
    window = tuple(local_window_size) if local_window_size is not None else None
    return tokamax.dot_product_attention(local_window_size=window, **kwargs)


@rule(
    "batch dims (query, key, value, lengths and a bias/mask not broadcast there sharded alike); "
    "heads: query on heads with key/value on kv-heads when the kv-heads split evenly over the "
    "mesh, or key/value Replicate when there is one kv-head (MQA)"
)
def _sharding(a):
    """Batch entries and heads are independent. Query head i sees kv-head i // (heads/kv_heads)
    (contiguous groups, Tokamax's order), so even chunks of both keep each group on one rank.
    Sequence sharding is not offered: causal, window and length masks use global positions."""
    from torch.distributed.tensor import Shard

    ndim, k = (
        len(shape(a["query"])),
        shape(a["key"]),
    )  # logits: [*batch, heads, seq_q, seq_kv], also ndim dims

    def logits_operand(name, d):  # bias/mask broadcast to the logits, aligned at the right
        t = a.get(name)
        if not is_spec(t):
            return {}
        j = d - (ndim - len(shape(t)))
        return {name: Shard(j)} if j >= 0 and shape(t)[j] > 1 else {}

    found = []
    for d in range(ndim - 3):  # batch dims
        ins = {"query": Shard(d), "key": Shard(d), "value": Shard(d)}
        ins |= logits_operand("bias", d) | logits_operand("mask", d)
        ins |= {n: Shard(0) for n in ("query_seq_lengths", "key_value_seq_lengths") if d == 0}
        found.append(([Shard(d)], ins))
    kv_heads = k[-2]
    if kv_heads % mesh_size(a) == 0 or kv_heads == 1:
        ins = {"query": Shard(ndim - 2)}
        if kv_heads > 1:
            ins |= {"key": Shard(ndim - 2), "value": Shard(ndim - 2)}
        ins |= logits_operand("bias", ndim - 3) | logits_operand("mask", ndim - 3)
        found.append(([Shard(ndim - 2)], ins))
    return found


def _sums(query, key):
    # each score sums head_dim products, each output seq_kv probability-weighted values
    return max(query.shape[-1], key.shape[-3])


# The public function below takes a layout and a window size as an int too; the op takes
# Tokamax's layout and arguments (lengths positional: autograd wants tensors positional).
@tokamax_op(
    "tokamax::dot_product_attention",
    calls=_call_tokamax,
    table="dot_product_attention",
    symbolic_fake=_attention_outputs,
    sharding=_sharding,
    autocast="lower_precision_fp",  # two matmuls, cast like aten's scaled_dot_product_attention
    check_reference=Reference(
        reference.dot_product_attention,
        reduces=_sums,
        scale=lambda value: 4 * max(1.0, rms(value)),
        grad_scale=lambda value: 16 * max(1.0, rms(value)),
    ),
)
def dot_product_attention_op(
    query: jax.Array,  # [*batch, seq_q, heads, head_dim]
    key: jax.Array,  # [*batch, seq_kv, kv_heads, head_dim]
    value: jax.Array,  # [*batch, seq_kv, kv_heads, head_dim_v]
    bias: jax.Array | None = None,  # broadcasts to [*batch, heads, seq_q, seq_kv]
    mask: jax.Array | None = None,  # bool, same broadcast; True = attend
    query_seq_lengths: jax.Array | None = None,  # int [batch]
    key_value_seq_lengths: jax.Array | None = None,  # int [batch]
    *,
    scale: float | None = None,
    is_causal: bool = False,
    local_window_size: list[int] | None = None,  # [left, right]
    logits_soft_cap: float | None = None,
    precision: str | None = None,
    implementation: str | None = None,
) -> jax.Array:
    """The schema of torch.ops.tokamax.dot_product_attention: the body calls Tokamax's by name."""


def _check(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, lengths: bool) -> None:
    if not (query.ndim == key.ndim == value.ndim) or query.ndim < 3:
        raise ValueError(
            "tokamax.dot_product_attention: query, key and value need the same rank (>= 3: "
            f"[*batch, seq, heads, head_dim]); got {tuple(query.shape)}, {tuple(key.shape)}, "
            f"{tuple(value.shape)}."
        )
    n, k = query.shape[-2], key.shape[-2]
    if key.shape[-2] != value.shape[-2] or n % k != 0:
        raise ValueError(
            f"tokamax.dot_product_attention: query has {n} heads and key/value have "
            f"{k}/{value.shape[-2]}; key and value need the same number of heads, and it must "
            "divide the query's (grouped-query attention)."
        )
    if query.dtype == torch.float16 and query.device.type == "cpu":
        raise NotImplementedError(
            "tokamax.dot_product_attention: float16 query/key/value cannot run on cpu (XLA:CPU has no "
            "float16 dot with float32 accumulation); use bfloat16 or float32 on cpu."
        )
    if lengths and query.ndim != 4:
        raise ValueError(
            "tokamax.dot_product_attention: query_seq_lengths/key_value_seq_lengths need exactly "
            f"one batch dimension ([batch, seq, heads, head_dim]); query is {tuple(query.shape)}."
        )


def _lengths(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.to(torch.int32)


def dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    bias: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    *,
    scale: float | None = None,
    is_causal: bool = False,
    query_seq_lengths: torch.Tensor | None = None,
    key_value_seq_lengths: torch.Tensor | None = None,
    local_window_size: int | tuple[int, int] | None = None,
    logits_soft_cap: float | None = None,
    precision: str | None = None,
    layout: str = "BTNH",
    implementation: str | None = None,
) -> torch.Tensor:
    """Scaled dot-product attention (Tokamax's `dot_product_attention`).

    Args:
      query: [*batch, seq_q, heads, head_dim] (layout "BTNH", the default), or
        [*batch, heads, seq_q, head_dim] with layout="BNTH" (F.sdpa's layout).
      key: [*batch, seq_kv, kv_heads, head_dim]; kv_heads divides heads (GQA/MQA).
      value: [*batch, seq_kv, kv_heads, head_dim_v] (head_dim_v may differ).
      bias: float, added to the scaled logits; broadcasts to [*batch, heads, seq_q, seq_kv].
      mask: bool, True = attend; broadcasts like bias.
      scale: logits scale; default 1/sqrt(head_dim).
      is_causal: query i attends keys 0..i (top-left aligned, like F.sdpa).
      query_seq_lengths, key_value_seq_lengths: int [batch]; positions at or
        beyond the length are masked (needs exactly one batch dimension).
      local_window_size: w or (left, right): query i attends keys i-left..i+right.
      logits_soft_cap: c -> logits = c * tanh(logits / c), after scale and bias.
      precision: dot precision ("default", "high", "highest"), for float32 on TPU.
      layout: "BTNH" (Tokamax) or "BNTH" (torch); the output has the same layout.
      implementation: a Tokamax implementation or fallback order ("mosaic,xla");
        None chooses by device (see `resolve_implementation`).

    Returns:
      [*batch, seq_q, heads, head_dim_v] in query's dtype (or its BNTH transpose).
    """
    if layout not in LAYOUTS:
        raise ValueError(f"tokamax.dot_product_attention: layout={layout!r}; use 'BTNH' or 'BNTH'.")
    if layout == "BNTH":
        query, key, value = (t.transpose(-3, -2) for t in (query, key, value))
    _check(query, key, value, query_seq_lengths is not None or key_value_seq_lengths is not None)
    if isinstance(local_window_size, int):
        local_window_size = (local_window_size, local_window_size)
    query_seq_lengths, key_value_seq_lengths = _lengths(query_seq_lengths), _lengths(key_value_seq_lengths)
    local_window_size = list(local_window_size) if local_window_size is not None else None
    out = call_op(dot_product_attention_op, locals())
    return out.transpose(-3, -2) if layout == "BNTH" else out


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    implementation: str | None = None,
) -> torch.Tensor:
    """`torch.nn.functional.scaled_dot_product_attention`'s signature and layout
    ([*batch, heads, seq, head_dim]) on Tokamax's attention.

    A bool `attn_mask` is a mask (True = attend), a float one an additive bias.
    Differences from F.sdpa: no dropout (dropout_p must be 0); a fully masked
    query row gives the mean of `value` instead of NaN or zeros.
    """
    if dropout_p != 0.0:
        raise NotImplementedError(
            f"tokamax.scaled_dot_product_attention: dropout_p={dropout_p}, but Tokamax's attention "
            "has no dropout; apply dropout outside, or use F.scaled_dot_product_attention."
        )
    if not enable_gqa and query.shape[-3] != key.shape[-3]:
        raise ValueError(
            f"tokamax.scaled_dot_product_attention: query has {query.shape[-3]} heads and key "
            f"{key.shape[-3]}; pass enable_gqa=True for grouped-query attention (as with F.sdpa)."
        )
    bias, mask = (
        (None, attn_mask) if attn_mask is not None and attn_mask.dtype == torch.bool else (attn_mask, None)
    )
    return dot_product_attention(
        query,
        key,
        value,
        bias,
        mask,
        scale=scale,
        is_causal=is_causal,
        layout="BNTH",
        implementation=implementation,
    )
