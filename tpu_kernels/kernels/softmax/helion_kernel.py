"""Row softmax as a Helion kernel: one tile is a block of full rows.

The configs are a preference order (runtime/sources/helion.py: each call runs the first that
tiles its rows): blocks of 32 rows where the row count allows (a grid step costs about as much
as moving a small block, bench/reports/helion_blocks_v5e.json), else 8.
"""

import helion
import helion.language as hl
import torch

CONFIGS = [helion.Config(block_sizes=[32]), helion.Config(block_sizes=[8])]


@helion.kernel(backend="pallas", configs=CONFIGS)
def softmax(x: torch.Tensor) -> torch.Tensor:
    n, _ = x.size()
    out = torch.empty_like(x)
    for tile_n in hl.tile(n):
        v = x[tile_n, :].to(torch.float32)
        e = torch.exp(v - torch.amax(v, dim=1, keepdim=True))
        out[tile_n, :] = (e / torch.sum(e, dim=1, keepdim=True)).to(out.dtype)
    return out
