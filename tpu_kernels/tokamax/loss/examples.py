"""Representative TPU calls of linear_softmax_cross_entropy_loss, for `tpu-kernels check`
(see `_examples.py`)."""

from __future__ import annotations

from tpu_kernels.tokamax._examples import BF16, I32, Calls, S, on_tpu


def linear_softmax_cross_entropy_loss() -> Calls:
    inputs = (S((512, 256), BF16), S((512,), I32), S((256, 2048), BF16))
    return [(inputs, dict(implementation=on_tpu("linear_softmax_cross_entropy_loss")))]
