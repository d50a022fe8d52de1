"""Matmul as a Helion kernel: output tiles accumulate K tiles in float32.

Written as `acc + torch.matmul(...)` of tiles cast to float32 rather than `hl.dot` of the input
tiles: the cast form runs every dtype in both CPU modes (Helion's eager reference mode runs
`hl.dot` through `aten::mm.dtype`, which this torch lacks on the CPU; tpu_kernels stands in for
it there, runtime/sources/helion_eager.py, but `hl.dot` refuses float64 tiles), and rounding each
K tile's partial sum to bf16 instead (`torch.matmul` of two bf16 tiles) was measured to miss the
bf16 tolerance (0.16 off at K=384). On a TPU the float32 dot runs at the precision torch's
setting asks for (runtime/sources/helion_pallas.py): HIGHEST under "highest" and "high", one
bf16 pass under "medium" (torch_tpu's default: with torch_tpu imported,
`torch.get_float32_matmul_precision()` starts at "medium"). There, for bf16 inputs, the cast
form was measured as fast as `hl.dot` of the bf16 tiles on the v5e
(bench/reports/helion_blocks_v5e.json, bench/helion_blocks_probe.py); under "highest" its dots
are float32 ones at HIGHEST, where `hl.dot` of bf16 tiles would stay one pass.

Configs, in order of preference (runtime/sources/helion.py: each call runs the first whose
blocks tile its M and N; K is an inner loop, which masks its last block): 512-blocks where M and
N allow them (the probe's fastest), 256 x 256, then 128 for every other width a 128-block
tiles.
"""

import helion
import helion.language as hl
import torch

CONFIGS = [
    helion.Config(block_sizes=[512, 512, 512]),
    helion.Config(block_sizes=[256, 256, 512]),
    helion.Config(block_sizes=[128, 128, 128]),
]


@helion.kernel(backend="pallas", configs=CONFIGS)
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
