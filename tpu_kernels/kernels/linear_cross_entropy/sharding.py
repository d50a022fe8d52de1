"""DTensor sharding rule of linear_cross_entropy (docs/distributed.md)."""

from typing import Any


def linear_cross_entropy_sharding(hidden: Any, weight: Any, labels: Any, **statics: Any) -> list:
    """Tokens are independent (the forward's token axis is "parallel"), so 2-D hidden and its
    labels shard on tokens with the weight replicated: each token's loss, log-sum-exp and
    hidden gradient stay on its rank, a "sum" is the ranks' partial sums, and "none" keeps the
    tokens' placement. A "mean" divides by the count of every rank's tokens, which no single
    rank holds, so it runs replicated. The vocabulary is not offered: each token's log-sum-exp
    spans all of it. Nor are the leading dims of N-D hidden: its residuals are flat [tokens]."""
    from torch.distributed.tensor import Partial, Replicate, Shard

    r = Replicate()
    found = [([r, r, r], [r, r, r])]
    ndim = len(hidden.tensor_meta.shape if hasattr(hidden, "tensor_meta") else hidden.shape)
    reduction = statics.get("reduction", "mean")
    if ndim == 2 and reduction != "mean":
        loss = Shard(0) if reduction == "none" else Partial()
        found.append(([loss, Shard(0), Shard(0)], [Shard(0), r, Shard(0)]))
    return found
