"""Named shapes for rmsnorm, shared by tests and benchmarks: x shape (weight is x.shape[-1])."""

TEST = {
    "small": (8, 128),
    "ragged_rows": (300, 256),
    "odd_dim": (5, 96),
    "batched": (2, 24, 128),
}

BENCH = {
    "4kx1k": (4096, 1024),
    "8kx4k": (8192, 4096),
}

# The one BENCH size of a `tpu-kernels bench --quick` run.
QUICK = "4kx1k"
# The BENCH sizes of a CPU's default run, where the kernel runs in Pallas' interpreter
# (`--full` times every size).
REDUCED = ("4kx1k",)
# where bench/overhead.py times the op against its own JAX function (issue 24: 128x256)
OVERHEAD = (128, 256)

# The chip runner's grid (kernels/rmsnorm/chip.py): row widths of real models' hidden and FFN
# sizes (Llama 3 8B 4096/14336, 13B-class 5120, 70B 8192) at 16 to 16k rows; and a few small
# ones for its CPU test (interpret mode).
CHIP = [
    (16, 4096),
    (2048, 4096),
    (8192, 4096),
    (16384, 2048),
    (4096, 5120),
    (8192, 8192),
    (4096, 14336),
    (1024, 16384),
]
CHIP_QUICK = [(16, 256), (40, 512)]
