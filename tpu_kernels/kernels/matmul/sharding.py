"""DTensor sharding rule of the matmul ops (Pallas and Helion): out = a @ b, a (M, K), b (K, N).

Per mesh dim: rows of a -> rows of out; columns of b -> columns of out; the
contraction dim K sharded on both -> each rank holds a partial sum (Partial).
The backward rule is derived from this one (tpu_kernels.sharding).
"""

from typing import Any


def matmul_sharding(a: Any, b: Any, **statics: Any) -> list:
    from torch.distributed.tensor import Partial, Replicate, Shard

    return [
        ([Replicate()], [Replicate(), Replicate()]),
        ([Shard(0)], [Shard(0), Replicate()]),
        ([Shard(1)], [Replicate(), Shard(1)]),
        ([Partial()], [Shard(1), Shard(0)]),
    ]
