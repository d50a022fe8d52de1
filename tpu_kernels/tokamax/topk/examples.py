"""Representative TPU calls of top_k and router_topk, for `tpu-kernels check`, and small CPU calls
(`<op>_small`) for the sharding simulation (see `_examples.py`)."""

from __future__ import annotations

import torch

from tpu_kernels.tokamax._examples import F32, Calls, S, on_tpu, on_tpu_sparsecore, randn


def top_k() -> Calls:
    return [((S((8, 1024), F32),), dict(k=16, implementation=on_tpu_sparsecore("top_k")))]


def router_topk() -> Calls:
    return [((S((512, 64), F32),), dict(k=8, implementation=on_tpu("router_topk")))]


def top_k_small() -> Calls:
    lengths = torch.randint(1, 13, (7,), generator=torch.Generator().manual_seed(1), dtype=torch.int32)
    return [((randn()(7, 12), lengths), dict(k=3))]


def router_topk_small() -> Calls:
    return [((randn()(7, 12),), dict(k=3))]
