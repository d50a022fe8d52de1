"""out = x + alpha * y with broadcasting, as a Helion kernel (2-D operands).

Host code only allocates the output (its shape is computed with
torch.broadcast_shapes, which touches no data); broadcasting itself happens in
the tile loop, where indexing a size-1 dimension with a tile repeats it.
Rows and columns are tiled; with Helion 1.5's Pallas interpret mode each tiled
dimension must be a multiple of its block size or fit in one block.
"""

import helion
import helion.language as hl
import torch


@helion.kernel(backend="pallas", config=helion.Config(block_sizes=[8, 128]))
def add(x: torch.Tensor, y: torch.Tensor, alpha: float = 1.0) -> torch.Tensor:
    out = torch.empty(
        torch.broadcast_shapes(x.shape, y.shape), dtype=torch.promote_types(x.dtype, y.dtype), device=x.device
    )
    for tile_m, tile_n in hl.tile(out.size()):
        acc = x[tile_m, tile_n].to(torch.float32) + alpha * y[tile_m, tile_n].to(torch.float32)
        out[tile_m, tile_n] = acc.to(out.dtype)
    return out
