"""Named ragged_dot shapes: (M, K, N, group_sizes).
TEST for the tests (small, each an edge case), BENCH for the benchmarks (real workloads)."""

from __future__ import annotations

TEST: dict[str, tuple[int, int, int, tuple[int, ...]]] = {
    "with_empty_group": (24, 16, 8, (5, 0, 11, 8)),
    "rows_past_the_groups": (30, 32, 16, (4, 4, 4)),  # rows 12.. are zero
    "groups_past_the_rows": (16, 8, 8, (10, 10)),  # clipped at M
}
BENCH: dict[str, tuple[int, int, int, tuple[int, ...]]] = {
    "moe_8x_4k": (8192, 4096, 14336, (1024,) * 8),
    "moe_64x_2k": (16384, 2048, 1408, (256,) * 64),
}
