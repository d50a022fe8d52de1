"""Named attention shapes, shared by the tests (TEST: small, each an edge case) and the
benchmarks (BENCH: real-workload sizes).

batch, seq_q, seq_kv, heads, kv_heads, head_dim, head_dim_v (Tokamax layout
[batch, seq, heads, head_dim]).
"""

from __future__ import annotations

TEST: dict[str, dict[str, int]] = {
    "mha": dict(batch=2, seq_q=16, seq_kv=16, heads=4, kv_heads=4, head_dim=32, head_dim_v=32),
    "gqa": dict(batch=2, seq_q=24, seq_kv=24, heads=8, kv_heads=2, head_dim=16, head_dim_v=16),
    "mqa_cross": dict(batch=1, seq_q=12, seq_kv=20, heads=4, kv_heads=1, head_dim=16, head_dim_v=16),
    "value_dim": dict(batch=2, seq_q=8, seq_kv=8, heads=2, kv_heads=2, head_dim=16, head_dim_v=24),
}
BENCH: dict[str, dict[str, int]] = {
    "llama3_8b_2k": dict(
        batch=1, seq_q=2048, seq_kv=2048, heads=32, kv_heads=8, head_dim=128, head_dim_v=128
    ),
    "gemma_4k": dict(batch=1, seq_q=4096, seq_kv=4096, heads=8, kv_heads=4, head_dim=256, head_dim_v=256),
    "batch8_1k": dict(batch=8, seq_q=1024, seq_kv=1024, heads=16, kv_heads=16, head_dim=64, head_dim_v=64),
}
