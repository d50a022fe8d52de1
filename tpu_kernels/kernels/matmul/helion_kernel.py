"""Matmul as a Helion kernel: output tiles accumulate K tiles in float32.

Written as `acc + torch.matmul(...)` rather than `torch.addmm` / `hl.dot`:
Helion's eager reference mode implements those with `torch.mm(..., out_dtype=)`,
which this torch build has no CPU kernel for, and the eager mode is one of the
two CPU modes tested. The tiles are cast to float32 first: `torch.matmul` of two
bf16 tiles returns bf16, and rounding each K tile's partial sum to bf16 was
measured to miss the bf16 tolerance (0.16 off at K=384). On a TPU the float32
dot runs at the precision torch's setting asks for (runtime/sources/helion_pallas.py):
HIGHEST under "highest" and "high", about a sixth of one bf16 pass's speed, bf16 inputs
too (their tiles are float32 by then); one bf16 pass under "medium". `hl.dot` on the bf16
tiles with a float32 accumulator would take one pass at any setting.
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
            acc = acc + torch.matmul(a[tile_m, tile_k].to(torch.float32), b[tile_k, tile_n].to(torch.float32))
        out[tile_m, tile_n] = acc.to(out.dtype)
    return out
