"""Representative TPU calls of linear_softmax_cross_entropy_loss, for `tpu-kernels check`, and small CPU calls
(`<op>_small`) for the sharding simulation (see `_examples.py`)."""

from __future__ import annotations

import torch

from tpu_kernels.tokamax._examples import BF16, I32, Calls, S, on_tpu, randn


def linear_softmax_cross_entropy_loss() -> Calls:
    inputs = (S((512, 256), BF16), S((512,), I32), S((256, 2048), BF16))
    return [(inputs, dict(implementation=on_tpu("linear_softmax_cross_entropy_loss")))]


def linear_softmax_cross_entropy_loss_small() -> Calls:
    rn = randn()
    x, w = rn(7, 16), rn(16, 10, scale=0.25)
    labels = torch.randint(0, 10, (7,), generator=torch.Generator().manual_seed(1), dtype=torch.int32)
    return [((x, labels, w), dict(reduction=r)) for r in ("sum", "none", "mean")]
