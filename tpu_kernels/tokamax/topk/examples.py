"""Representative TPU calls of top_k and router_topk, for `tpu-kernels check` (see `_examples.py`)."""

from __future__ import annotations

from tpu_kernels.tokamax._examples import F32, Calls, S, on_tpu, on_tpu_sparsecore


def top_k() -> Calls:
    return [((S((8, 1024), F32),), dict(k=16, implementation=on_tpu_sparsecore("top_k")))]


def router_topk() -> Calls:
    return [((S((512, 64), F32),), dict(k=8, implementation=on_tpu("router_topk")))]
