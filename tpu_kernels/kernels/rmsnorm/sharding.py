"""DTensor sharding rules of the Helion rmsnorm ops (the Pallas rmsnorm is `rowwise`).

The Helion kernels take 2-D x (rows, d) and keep inv_rms as (rows,), which does
not broadcast against x from the right, so they spell the row rule out: rows
sharded -> rows sharded, weight Replicate. dweight sums over rows: with rows
sharded, each rank sums its own (Partial).
"""

from typing import Any


def _placements() -> tuple[Any, Any, Any]:
    from torch.distributed.tensor import Partial, Replicate, Shard

    return Partial(), Replicate(), Shard(0)


def rmsnorm_sharding(x: Any, weight: Any, *statics: Any, **kw: Any) -> list:
    _, r, s = _placements()
    return [([r, r], [r, r]), ([s, s], [s, r])]


def dx_sharding(x: Any, weight: Any, inv_rms: Any, grad_y: Any) -> list:
    _, r, s = _placements()
    return [([r], [r, r, r, r]), ([s], [s, r, s, s])]


def dweight_sharding(x: Any, inv_rms: Any, grad_y: Any) -> list:
    p, r, s = _placements()
    return [([r], [r, r, r]), ([p], [s, s, s])]
