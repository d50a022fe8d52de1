"""Representative TPU calls of dot_product_attention, for `tpu-kernels check`, and small CPU calls
(`<op>_small`) for the sharding simulation (see `_examples.py`)."""

from __future__ import annotations

from tpu_kernels.tokamax._examples import BF16, Calls, S, on_tpu, randn


def dot_product_attention() -> Calls:
    mha = [S((1, 512, 4, 128), BF16)] * 3
    gqa = [S((1, 1024, 8, 128), BF16), S((1, 1024, 2, 128), BF16), S((1, 1024, 2, 128), BF16)]
    impl = on_tpu("dot_product_attention")
    return [
        (tuple(mha), dict(is_causal=True, implementation=impl)),
        (tuple(gqa), dict(implementation=impl)),
    ]


def dot_product_attention_small() -> Calls:
    rn = randn()
    q, k, v = rn(4, 6, 4, 8), rn(4, 5, 2, 8), rn(4, 5, 2, 8)
    bias = rn(1, 4, 6, 5)  # broadcast over the batch
    mqa = (q, k[:, :, :1], v[:, :, :1])
    return [((q, k, v, bias), {}), ((q, k, v), dict(is_causal=True)), (mqa, dict(is_causal=True))]
