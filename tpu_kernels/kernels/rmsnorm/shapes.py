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
