"""Representative TPU calls of deepseek_rope, for `tpu-kernels check`, and small CPU calls
(`<op>_small`) for the sharding simulation (see `_examples.py`)."""

from __future__ import annotations

import torch

from tpu_kernels.tokamax._examples import BF16, F32, I32, Calls, S, on_tpu, randn


def deepseek_rope() -> Calls:
    inputs = (S((64, 4, 128), BF16), S((64,), I32), S((128, 64), F32))
    return [(inputs, dict(implementation=on_tpu("deepseek_rope")))]


def deepseek_rope_small() -> Calls:
    rn = randn()
    positions = torch.randint(0, 16, (7,), generator=torch.Generator().manual_seed(1), dtype=torch.int32)
    return [((rn(7, 3, 128), positions, rn(16, 64)), {}), ((rn(7, 128), positions, rn(16, 64)), {})]
