"""Representative TPU calls of ragged_gather and ragged_gather_reduce, for `tpu-kernels check`, and small CPU calls
(`<op>_small`) for the sharding simulation (see `_examples.py`)."""

from __future__ import annotations

import torch

from tpu_kernels.tokamax._examples import BF16, BOOL, F32, I32, Calls, S, on_tpu_sparsecore, randn


def ragged_gather() -> Calls:
    inputs = (S((1024, 256), BF16), S((512,), I32), S((1,), I32), S((1,), I32))
    return [(inputs, dict(implementation=on_tpu_sparsecore("ragged_gather")))]


def ragged_gather_reduce() -> Calls:
    # a real MoE size: inputs that fit in VMEM take Tokamax's XLA path even on TPU v7
    inputs = (S((16384, 4096), BF16), S((8192,), I32), S((8192,), F32), S((8192,), BOOL))
    return [(inputs, dict(reduce_group_size=8, implementation=on_tpu_sparsecore("ragged_gather_reduce")))]


def ragged_gather_small() -> Calls:
    rn = randn()
    x, idx = rn(10, 7), torch.randint(0, 10, (8,), generator=torch.Generator().manual_seed(1))
    return [((x, idx, torch.tensor([0], dtype=torch.int32), torch.tensor([8], dtype=torch.int32)), {})]


def ragged_gather_reduce_small() -> Calls:
    rn = randn()
    gen = torch.Generator().manual_seed(1)
    x, idx = rn(10, 7), torch.randint(0, 10, (12,), generator=gen)
    mask = torch.rand(12, generator=gen) > 0.3
    return [((x, idx, rn(12), mask), dict(reduce_group_size=2))]  # 6 tokens: whole on 2 and 3 shards
