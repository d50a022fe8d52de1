"""Representative TPU calls of kimi_delta_attention, for `tpu-kernels check`, and small CPU calls
(`<op>_small`) for the sharding simulation (see `_examples.py`)."""

from __future__ import annotations

import torch

from tpu_kernels.tokamax._examples import BF16, Calls, S, on_tpu, randn


def kimi_delta_attention() -> Calls:
    inputs = (*[S((2, 1, 256, 128), BF16)] * 4, S((2, 1, 256), BF16))
    return [(inputs, dict(implementation=on_tpu("kimi_delta_attention")))]


def kimi_delta_attention_small() -> Calls:
    import torch.nn.functional as F

    rn = randn()
    h, b, t, k = 6, 4, 4, 8  # 6 heads: even on 2 and 3 shards (the rule's condition)
    qkv = [rn(h, b, t, k) for _ in range(3)]
    gate, beta = -F.softplus(rn(h, b, t, k)), torch.sigmoid(rn(h, b, t))
    return [((*qkv, gate, beta), dict(use_qk_l2norm=True))]
