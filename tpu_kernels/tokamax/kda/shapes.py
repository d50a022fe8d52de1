"""Named kimi_delta_attention shapes: (heads, batch, seq, key_dim, value_dim).
TEST for the tests, BENCH for the benchmarks (real workloads)."""

from __future__ import annotations

TEST: dict[str, tuple[int, int, int, int, int]] = {"small": (2, 2, 6, 8, 8)}
BENCH: dict[str, tuple[int, int, int, int, int]] = {"kimi_linear_4k": (32, 1, 4096, 128, 128)}
