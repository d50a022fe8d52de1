"""Named linear_softmax_cross_entropy_loss shapes: (B, H, V).
TEST for the tests (small, each an edge case), BENCH for the benchmarks (real workloads)."""

from __future__ import annotations

TEST: dict[str, tuple[int, int, int]] = {
    "small": (16, 32, 100),
    "odd_vocab": (40, 64, 257),
}
BENCH: dict[str, tuple[int, int, int]] = {
    "llama3_8k_tokens": (8192, 4096, 128256),
    "gemma_4k_tokens": (4096, 2304, 256000),
}
