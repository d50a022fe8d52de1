"""Representative TPU calls of layer_norm, for `tpu-kernels check`, and small CPU calls
(`<op>_small`) for the sharding simulation (see `_examples.py`)."""

from __future__ import annotations

from tpu_kernels.tokamax._examples import BF16, Calls, S, on_tpu, randn


def layer_norm() -> Calls:
    x, w = S((4096, 1024), BF16), S((1024,), BF16)
    impl = on_tpu("layer_norm")
    return [((x, w, w), dict(implementation=impl)), ((x, w), dict(subtract_mean=False, implementation=impl))]


def layer_norm_small() -> Calls:
    rn = randn()
    x, w, b = rn(7, 5, 16), rn(16), rn(16)
    return [((x, w, b), {}), ((x, w), dict(subtract_mean=False)), ((rn(16, 5), rn(16)), dict(dim=0))]
