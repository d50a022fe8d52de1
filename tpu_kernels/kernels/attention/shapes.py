"""Named shapes for attention, shared by tests and benchmarks:
(batch, heads, kv_heads, seq_q, seq_k, head_dim)."""

TEST = {
    "tiled": (1, 2, 2, 256, 256, 64),
    "grouped": (1, 4, 1, 128, 128, 32),  # MQA: one kv head for four q heads
    "ragged": (2, 2, 1, 40, 40, 16),  # shorter than a block: whole-sequence blocks
    "longer_keys": (1, 2, 2, 64, 200, 32),
}

BENCH = {
    "2k_gqa4": (1, 32, 8, 2048, 2048, 128),
    "4k": (1, 32, 32, 4096, 4096, 128),
    "8k_gqa8": (1, 32, 4, 8192, 8192, 128),
}

# The one BENCH size of a `tpu-kernels bench --quick` run.
QUICK = "2k_gqa4"
# The BENCH sizes of a CPU's default run, where the kernels run in Pallas' interpreter.
REDUCED = ("2k_gqa4",)

# The chip runner's grid (kernels/attention/chip.py, section "attention"), causal: grouped kv
# heads 4:1, a length 512 does not divide (the last block's overhang), head_dim 256 and 64.
CHIP = {
    "2k_gqa4": (1, 32, 8, 2048, 2048, 128),
    "4352_gqa7": (1, 28, 4, 4352, 4352, 128),
    "4k_d256": (1, 16, 16, 4096, 4096, 256),
    "1408_d64": (1, 32, 8, 1408, 1408, 64),
}
# the chip runner's CPU test (interpret mode): a length no block divides
CHIP_QUICK = {"ragged": (1, 2, 1, 200, 200, 128)}
