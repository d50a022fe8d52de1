"""Named top_k / router_topk shapes: (rows, columns, k).
TEST for the tests (small, each an edge case), BENCH for the benchmarks (real workloads)."""

from __future__ import annotations

TEST: dict[str, tuple[int, int, int]] = {"rows": (6, 40, 5), "router": (16, 32, 4)}
BENCH: dict[str, tuple[int, int, int]] = {
    "router_256_experts": (8192, 256, 8),
    "indexer_32k": (64, 32768, 2048),
}
