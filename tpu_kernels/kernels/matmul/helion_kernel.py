"""Matmul as a Helion kernel: output tiles accumulate K tiles in float32.

Written as `acc + torch.matmul(...)` rather than `torch.addmm` / `hl.dot`:
Helion's eager reference mode implements those with `torch.mm(..., out_dtype=)`,
which this torch build has no CPU kernel for, and the eager mode is one of the
two CPU modes tested.
"""

import helion
import helion.language as hl
import torch


@helion.kernel(backend="pallas", config=helion.Config(block_sizes=[128, 128, 128]))
def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    m, k = a.size()
    _, n = b.size()
    out = torch.empty([m, n], dtype=a.dtype, device=a.device)
    for tile_m, tile_n in hl.tile([m, n]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = acc + torch.matmul(a[tile_m, tile_k], b[tile_k, tile_n]).to(torch.float32)
        out[tile_m, tile_n] = acc.to(out.dtype)
    return out
