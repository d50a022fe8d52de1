"""Named ragged_gather_reduce shapes: (num_rows, hidden, routes, reduce_group_size).
TEST for the tests (small, each an edge case), BENCH for the benchmarks (real workloads)."""

from __future__ import annotations

TEST: dict[str, tuple[int, int, int, int]] = {"top3": (10, 16, 24, 3)}
BENCH: dict[str, tuple[int, int, int, int]] = {
    "moe_top8_7k": (65536, 7168, 65536, 8),
    "moe_top2_4k": (16384, 4096, 16384, 2),
}
