"""Named mHC shapes: (tokens, streams M, hidden H).
TEST for the tests, BENCH for the benchmarks (real workloads)."""

from __future__ import annotations

TEST: dict[str, tuple[int, int, int]] = {"t5_m4": (5, 4, 32)}
BENCH: dict[str, tuple[int, int, int]] = {"dsv4_4k_tokens": (4096, 4, 7168)}
