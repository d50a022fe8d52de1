"""Named gated_linear_unit shapes: (x shape [*batch, M, K], N).
TEST for the tests (small, each an edge case), BENCH for the benchmarks (real workloads)."""

from __future__ import annotations

TEST: dict[str, tuple[tuple[int, ...], int]] = {
    "rows": ((8, 32), 48),
    "batched": ((2, 12, 64), 40),
}
BENCH: dict[str, tuple[tuple[int, ...], int]] = {
    "llama3_8b_mlp": ((4096, 4096), 14336),
    "small_mlp": ((8192, 1024), 4096),
}
