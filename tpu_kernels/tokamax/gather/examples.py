"""Representative TPU calls of ragged_gather and ragged_gather_reduce, for `tpu-kernels check`
(see `_examples.py`)."""

from __future__ import annotations

from tpu_kernels.tokamax._examples import BF16, BOOL, F32, I32, Calls, S, on_tpu_sparsecore


def ragged_gather() -> Calls:
    inputs = (S((1024, 256), BF16), S((512,), I32), S((1,), I32), S((1,), I32))
    return [(inputs, dict(implementation=on_tpu_sparsecore("ragged_gather")))]


def ragged_gather_reduce() -> Calls:
    # a real MoE size: inputs that fit in VMEM take Tokamax's XLA path even on TPU v7
    inputs = (S((16384, 4096), BF16), S((8192,), I32), S((8192,), F32), S((8192,), BOOL))
    return [(inputs, dict(reduce_group_size=8, implementation=on_tpu_sparsecore("ragged_gather_reduce")))]
