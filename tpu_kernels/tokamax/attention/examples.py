"""Representative TPU calls of dot_product_attention, for `tpu-kernels check` (see `_examples.py`)."""

from __future__ import annotations

from tpu_kernels.tokamax._examples import BF16, Calls, S, on_tpu


def dot_product_attention() -> Calls:
    mha = [S((1, 512, 4, 128), BF16)] * 3
    gqa = [S((1, 1024, 8, 128), BF16), S((1, 1024, 2, 128), BF16), S((1, 1024, 2, 128), BF16)]
    impl = on_tpu("dot_product_attention")
    return [
        (tuple(mha), dict(is_causal=True, implementation=impl)),
        (tuple(gqa), dict(implementation=impl)),
    ]
