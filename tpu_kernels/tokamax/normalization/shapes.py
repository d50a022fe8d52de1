"""Named layer_norm / rms_norm shapes: x's shape, normalised over the last dim.
TEST for the tests (small, each an edge case), BENCH for the benchmarks (real workloads)."""

from __future__ import annotations

TEST: dict[str, tuple[int, ...]] = {
    "rows": (8, 128),
    "batched": (2, 24, 96),
    "odd": (5, 7, 33),
}
BENCH: dict[str, tuple[int, ...]] = {
    "4kx4k": (4096, 4096),
    "16kx8k": (16384, 8192),
}
