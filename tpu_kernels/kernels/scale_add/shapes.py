"""Named shapes for scale_add, shared by tests and benchmarks: (x shape, y shape)."""

TEST = {
    "matrix": ((64, 256), (64, 256)),
    "ragged_rows": ((300, 128), (300, 128)),
    "odd_last_dim": ((7, 33), (7, 33)),
    "broadcast_row": ((16, 256), (256,)),
    "broadcast_col": ((4, 16, 128), (4, 1, 128)),
    "vector": ((1000,), (1000,)),
}

BENCH = {
    "1M": ((1024, 1024), (1024, 1024)),
    "4M": ((2048, 2048), (2048, 2048)),
    "16M": ((4096, 4096), (4096, 4096)),
}

# The one BENCH size of a `tpu-kernels bench --quick` run.
QUICK = "1M"
# The BENCH sizes of a CPU's default run, where the kernel runs in Pallas' interpreter
# (`--full` times every size).
REDUCED = ("1M",)
# where bench/overhead.py times the op against its own JAX function (issue 24: 128x256)
OVERHEAD = ((128, 256), (128, 256))

# The chip runner's grid (kernels/scale_add/chip.py), and its CPU test's.
CHIP = [(16, 4096), (4096, 4096), (8192, 14336)]
CHIP_QUICK = [(16, 256)]
