"""Named shapes of the Tokamax ops, shared by the tests (TEST: small, each an edge case)
and the benchmark suites (BENCH: real-workload sizes).

Attention: batch, seq_q, seq_kv, heads, kv_heads, head_dim, head_dim_v (Tokamax
layout [batch, seq, heads, head_dim]).
"""

from __future__ import annotations

ATTENTION_TEST: dict[str, dict[str, int]] = {
    "mha": dict(batch=2, seq_q=16, seq_kv=16, heads=4, kv_heads=4, head_dim=32, head_dim_v=32),
    "gqa": dict(batch=2, seq_q=24, seq_kv=24, heads=8, kv_heads=2, head_dim=16, head_dim_v=16),
    "mqa_cross": dict(batch=1, seq_q=12, seq_kv=20, heads=4, kv_heads=1, head_dim=16, head_dim_v=16),
    "value_dim": dict(batch=2, seq_q=8, seq_kv=8, heads=2, kv_heads=2, head_dim=16, head_dim_v=24),
}
ATTENTION_BENCH: dict[str, dict[str, int]] = {
    "llama3_8b_2k": dict(
        batch=1, seq_q=2048, seq_kv=2048, heads=32, kv_heads=8, head_dim=128, head_dim_v=128
    ),
    "gemma_4k": dict(batch=1, seq_q=4096, seq_kv=4096, heads=8, kv_heads=4, head_dim=256, head_dim_v=256),
    "batch8_1k": dict(batch=8, seq_q=1024, seq_kv=1024, heads=16, kv_heads=16, head_dim=64, head_dim_v=64),
}

# layer_norm / rms_norm: x's shape, normalised over the last dim.
NORM_TEST: dict[str, tuple[int, ...]] = {
    "rows": (8, 128),
    "batched": (2, 24, 96),
    "odd": (5, 7, 33),
}
NORM_BENCH: dict[str, tuple[int, ...]] = {
    "4kx4k": (4096, 4096),
    "16kx8k": (16384, 8192),
}

# gated_linear_unit: (x shape [*batch, M, K], N).
GLU_TEST: dict[str, tuple[tuple[int, ...], int]] = {
    "rows": ((8, 32), 48),
    "batched": ((2, 12, 64), 40),
}
GLU_BENCH: dict[str, tuple[tuple[int, ...], int]] = {
    "llama3_8b_mlp": ((4096, 4096), 14336),
    "small_mlp": ((8192, 1024), 4096),
}

# ragged_dot: (M, K, N, group_sizes).
RAGGED_TEST: dict[str, tuple[int, int, int, tuple[int, ...]]] = {
    "with_empty_group": (24, 16, 8, (5, 0, 11, 8)),
    "rows_past_the_groups": (30, 32, 16, (4, 4, 4)),  # rows 12.. are zero
    "groups_past_the_rows": (16, 8, 8, (10, 10)),  # clipped at M
}
RAGGED_BENCH: dict[str, tuple[int, int, int, tuple[int, ...]]] = {
    "moe_8x_4k": (8192, 4096, 14336, (1024,) * 8),
    "moe_64x_2k": (16384, 2048, 1408, (256,) * 64),
}

# linear_softmax_cross_entropy_loss: (B, H, V).
LOSS_TEST: dict[str, tuple[int, int, int]] = {
    "small": (16, 32, 100),
    "odd_vocab": (40, 64, 257),
}
LOSS_BENCH: dict[str, tuple[int, int, int]] = {
    "llama3_8k_tokens": (8192, 4096, 128256),
    "gemma_4k_tokens": (4096, 2304, 256000),
}

# triangle_multiplication: (N, C, H, D).
TRIANGLE_TEST: dict[str, tuple[int, int, int, int]] = {
    "small": (8, 16, 8, 16),
    "wide_hidden": (6, 8, 16, 12),
}
TRIANGLE_BENCH: dict[str, tuple[int, int, int, int]] = {
    "af2_256": (256, 128, 128, 128),
    "af3_384": (384, 128, 128, 128),
}

# ---- tokamax.ops extras ----------------------------------------------------------------------

# top_k / router_topk: (rows, columns, k).
TOPK_TEST: dict[str, tuple[int, int, int]] = {"rows": (6, 40, 5), "router": (16, 32, 4)}
TOPK_BENCH: dict[str, tuple[int, int, int]] = {
    "router_256_experts": (8192, 256, 8),
    "indexer_32k": (64, 32768, 2048),
}

# ragged_gather_reduce: (num_rows, hidden, routes, reduce_group_size).
GATHER_REDUCE_TEST: dict[str, tuple[int, int, int, int]] = {"top3": (10, 16, 24, 3)}
GATHER_REDUCE_BENCH: dict[str, tuple[int, int, int, int]] = {
    "moe_top8_7k": (65536, 7168, 65536, 8),
    "moe_top2_4k": (16384, 4096, 16384, 2),
}

# deepseek_rope: (tokens, heads, head_dim, rotary_dim); heads 0 means x is [tokens, head_dim].
ROPE_TEST: dict[str, tuple[int, int, int, int]] = {"heads": (6, 2, 128, 64), "flat": (6, 0, 256, 64)}
ROPE_BENCH: dict[str, tuple[int, int, int, int]] = {
    "dsv4_q": (8192, 64, 512, 64),
    "dsv4_kv": (8192, 0, 512, 64),
}

# mhc_pre / mhc_post: (tokens, streams M, hidden H).
MHC_TEST: dict[str, tuple[int, int, int]] = {"t5_m4": (5, 4, 32)}
MHC_BENCH: dict[str, tuple[int, int, int]] = {"dsv4_4k_tokens": (4096, 4, 7168)}

# kimi_delta_attention: (heads, batch, seq, key_dim, value_dim).
KDA_TEST: dict[str, tuple[int, int, int, int, int]] = {"small": (2, 2, 6, 8, 8)}
KDA_BENCH: dict[str, tuple[int, int, int, int, int]] = {"kimi_linear_4k": (32, 1, 4096, 128, 128)}
