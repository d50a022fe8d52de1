"""Named triangle_multiplication shapes: (N, C, H, D).
TEST for the tests (small, each an edge case), BENCH for the benchmarks (real workloads)."""

from __future__ import annotations

TEST: dict[str, tuple[int, int, int, int]] = {
    "small": (8, 16, 8, 16),
    "wide_hidden": (6, 8, 16, 12),
}
BENCH: dict[str, tuple[int, int, int, int]] = {
    "af2_256": (256, 128, 128, 128),
    "af3_384": (384, 128, 128, 128),
}
