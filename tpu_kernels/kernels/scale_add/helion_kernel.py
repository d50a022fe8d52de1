"""out = x + alpha * y with broadcasting, as a Helion kernel (2-D operands).

Host code only allocates the output (its shape is computed with
torch.broadcast_shapes, which touches no data); broadcasting itself happens in
the tile loop, where indexing a size-1 dimension with a tile repeats it.
Rows and columns are tiled; Helion 1.5's Pallas backend runs whole blocks only, so each tiled
dimension must be a multiple of its block size or fit in one block. The configs are a
preference order (runtime/sources/helion.py: each call runs the first that tiles its shapes):
large blocks where the shapes allow them (a grid step costs about as much as moving a small
block, bench/reports/helion_blocks_v5e.json), down to 8 x 128 for any width a 128-block tiles.
"""

import helion
import helion.language as hl
import torch

CONFIGS = [
    helion.Config(block_sizes=[256, 2048]),
    helion.Config(block_sizes=[64, 512]),
    helion.Config(block_sizes=[8, 128]),
]


@helion.kernel(backend="pallas", configs=CONFIGS)
def add(x: torch.Tensor, y: torch.Tensor, alpha: float = 1.0) -> torch.Tensor:
    out = torch.empty(
        torch.broadcast_shapes(x.shape, y.shape), dtype=torch.promote_types(x.dtype, y.dtype), device=x.device
    )
    for tile_m, tile_n in hl.tile(out.size()):
        acc = x[tile_m, tile_n].to(torch.float32) + alpha * y[tile_m, tile_n].to(torch.float32)
        out[tile_m, tile_n] = acc.to(out.dtype)
    return out
