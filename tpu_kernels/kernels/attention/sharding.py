"""DTensor sharding rule of attention (docs/distributed.md)."""

from typing import Any


def _mesh_size(spec: Any) -> int:
    mesh = getattr(spec, "mesh", None)
    return mesh.size() if mesh is not None else 1


def attention_sharding(q: Any, k: Any, v: Any, **statics: Any) -> list:
    """Batch entries and heads are independent (their grid axes are "parallel" and the kernels
    never read their positions). q head h reads kv head h // (heads / kv_heads), contiguous
    groups, so heads shard when even chunks keep each group on one rank: q on heads with k and v
    on kv heads where the kv heads split evenly over the mesh, or k and v Replicate where there
    is one kv head (MQA). Uneven chunks could pair a q head with another group's kv head, so
    they are not offered. The sequence is not offered: the mask reads global positions. The
    backward's rule is derived from this one."""
    from torch.distributed.tensor import Replicate, Shard

    r = Replicate()
    found = [([r, r], [r, r, r]), ([Shard(0), Shard(0)], [Shard(0)] * 3)]
    kv_heads = k.tensor_meta.shape[1] if hasattr(k, "tensor_meta") else k.shape[1]
    if kv_heads == 1:
        found.append(([Shard(1), Shard(1)], [Shard(1), r, r]))
    elif kv_heads % _mesh_size(q) == 0:
        found.append(([Shard(1), Shard(1)], [Shard(1)] * 3))
    return found
