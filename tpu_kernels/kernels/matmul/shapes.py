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
