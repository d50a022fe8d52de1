"""Named shapes for softmax, shared by tests and benchmarks."""

TEST = {
    "small": (8, 128),
    "ragged_rows": (300, 256),
    "odd_cols": (5, 37),
    "batched": (2, 3, 64, 128),
    "vector": (1000,),
}

BENCH = {
    "1kx1k": (1024, 1024),
    "4kx1k": (4096, 1024),
    "4kx4k": (4096, 4096),
}

# The one BENCH size of a `tpu-kernels bench --quick` run.
QUICK = "1kx1k"
# The BENCH sizes of a CPU's default run, where the kernel runs in Pallas' interpreter
# (`--full` times every size).
REDUCED = ("1kx1k",)
# where bench/overhead.py times the op against its own JAX function (issue 24: 128x256)
OVERHEAD = (128, 256)

# The chip runner's grid (kernels/softmax/chip.py): attention-score and vocabulary rows (32k-256k);
# and a few small ones for its CPU test.
CHIP = [(4096, 1024), (4096, 4096), (8192, 8192), (2048, 32768), (512, 131072), (8, 131072), (256, 262144)]
CHIP_QUICK = [(16, 256), (8, 1024)]
