"""Named shapes for matmul, shared by tests and benchmarks: (M, K, N)."""

TEST = {
    "one_block": (128, 256, 128),
    "tiled": (512, 512, 256),
    "small_m": (8, 256, 384),
}

BENCH = {
    "512": (512, 512, 512),
    "1024": (1024, 1024, 1024),
    "2048": (2048, 2048, 2048),
}

# The one BENCH size of a `tpu-kernels bench --quick` run.
QUICK = "512"
# The BENCH sizes of a CPU's default run: the kernel runs in Pallas' interpreter there, which
# takes seconds a call at 2048, and torch's bfloat16 matmul takes seconds at 1024 (`--full`
# times every size).
REDUCED = ("512",)
# where bench/overhead.py times the op against its own JAX function (issue 24: 128x256)
OVERHEAD = (128, 256, 128)

# The chip runner's grid (kernels/matmul/chip.py): 2048^3-8192^3, projection and FFN shapes, and
# decode shapes (M = 1-64); then widths no default block divides (issue 58: a 7B model's 3584
# and 18944, a batch of 3000 rows, decode at those widths), where the kernel once padded its
# operands with a copy. CHIP_QUICK_*: its CPU test's.
CHIP_BF16 = [
    (2048, 2048, 2048),
    (4096, 4096, 4096),
    (8192, 8192, 8192),
    (8192, 4096, 14336),
    (8192, 14336, 4096),
    (8192, 4096, 4096),
    (8192, 4096, 1024),
    (1, 4096, 14336),
    (16, 4096, 14336),
    (64, 4096, 4096),
    (64, 14336, 4096),
]
CHIP_F32 = [(2048, 2048, 2048), (4096, 4096, 4096), (8192, 4096, 14336), (16, 4096, 14336)]
CHIP_RAGGED_BF16 = [
    (4096, 3584, 18944),
    (4096, 18944, 3584),
    (4096, 3584, 3584),
    (3000, 4096, 4096),
    (8, 3584, 18944),
    (128, 4096, 14336),
]
CHIP_RAGGED_F32 = [(4096, 3584, 4096)]
CHIP_QUICK_BF16 = [(64, 256, 256), (8, 256, 384)]
CHIP_QUICK_F32 = [(64, 256, 128)]
