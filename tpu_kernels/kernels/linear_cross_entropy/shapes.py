"""Named shapes for linear_cross_entropy, shared by tests and benchmarks:
(tokens, d, vocabulary)."""

TEST = {
    "tiled": (64, 128, 512),
    "ragged_vocab": (40, 64, 300),  # no 128-block divides the vocabulary
    "odd_tokens": (37, 32, 100),  # fewer classes than a block, tokens no tile divides
    "wide": (16, 256, 1000),
}

BENCH = {
    "512_8k": (512, 1024, 8192),  # a small model's head: the quick size, which the CPU interprets
    "1k_32k": (1024, 2048, 32000),
    "8k_128k": (8192, 4096, 128256),
    "8k_256k": (8192, 3072, 256000),
}

# The one BENCH size of a `tpu-kernels bench --quick` run.
QUICK = "512_8k"
# The BENCH sizes of a CPU's default run, where the kernels run in Pallas' interpreter.
REDUCED = ("512_8k",)

# The chip runner's grid (kernels/linear_cross_entropy/chip.py, section "loss"): Llama 2's and Llama 3's
# vocabularies at 8192 tokens, Qwen2's (no 512-block divides it), and a short batch.
CHIP = {
    "8k_32k": (8192, 4096, 32000),
    "8k_128k": (8192, 4096, 128256),
    "4k_152k": (4096, 3584, 152064),
    "1192_32k": (1192, 4096, 32000),
}
# the chip runner's CPU test (interpret mode): a length no block divides
CHIP_QUICK = {"ragged": (72, 128, 300)}
