"""Row softmax as a Helion kernel: one tile is a block of full rows."""

import helion
import helion.language as hl
import torch


@helion.kernel(backend="pallas", config=helion.Config(block_sizes=[8]))
def softmax(x: torch.Tensor) -> torch.Tensor:
    n, _ = x.size()
    out = torch.empty_like(x)
    for tile_n in hl.tile(n):
        v = x[tile_n, :].to(torch.float32)
        e = torch.exp(v - torch.amax(v, dim=1, keepdim=True))
        out[tile_n, :] = (e / torch.sum(e, dim=1, keepdim=True)).to(out.dtype)
    return out
