"""DTensor sharding rule of attention (docs/distributed.md)."""

from typing import Any


def attention_sharding(q: Any, k: Any, v: Any, **statics: Any) -> list:
    """Batch and heads are independent (their grid axes are "parallel" and the kernels never
    read their positions); heads shard q and the kv heads alike, so each rank keeps whole
    groups (q head h of a shard reads kv head h // group of the same shard). The sequence is
    not offered: the mask reads global positions. The backward's rule is derived from this one."""
    from torch.distributed.tensor import Replicate, Shard

    r = Replicate()
    return [([r, r], [r, r, r])] + [([Shard(d), Shard(d)], [Shard(d)] * 3) for d in (0, 1)]
