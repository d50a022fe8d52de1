"""Named deepseek_rope shapes: (tokens, heads, head_dim, rotary_dim); heads 0 means x is
[tokens, head_dim]. TEST for the tests, BENCH for the benchmarks (real workloads)."""

from __future__ import annotations

TEST: dict[str, tuple[int, int, int, int]] = {"heads": (6, 2, 128, 64), "flat": (6, 0, 256, 64)}
BENCH: dict[str, tuple[int, int, int, int]] = {
    "dsv4_q": (8192, 64, 512, 64),
    "dsv4_kv": (8192, 0, 512, 64),
}
