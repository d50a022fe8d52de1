"""Representative TPU calls of layer_norm, for `tpu-kernels check` (see `_examples.py`)."""

from __future__ import annotations

from tpu_kernels.tokamax._examples import BF16, Calls, S, on_tpu


def layer_norm() -> Calls:
    x, w = S((4096, 1024), BF16), S((1024,), BF16)
    impl = on_tpu("layer_norm")
    return [((x, w, w), dict(implementation=impl)), ((x, w), dict(subtract_mean=False, implementation=impl))]
