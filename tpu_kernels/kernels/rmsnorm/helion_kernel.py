"""RMSNorm as Helion kernels: the forward (which returns the inverse RMS), the same without
it (`rmsnorm_visible`: the op's `visible_kernel=`, which a TPU call needing no gradient
launches; a second output costs torch_tpu's launch about as much as the first), and the
backward as two kernels, one per gradient.

Why two backward kernels: dx reduces along rows (a tile is a block of full
rows) and dweight along columns (a tile is a block of full columns). One
kernel can do both (the row_reduction template's Helion variant does: one tile
spanning every column, an inner loop over blocks of 128 rows accumulating
dweight), but its grid has a single step, so one TensorCore does all the work;
two kernels each keep a parallel grid. Helion 1.5's Pallas backend compiles
neither two top-level tile loops in one kernel nor atomics. The dweight kernel
holds every row of its column block at once, which bounds the rows it can take
by VMEM; the Pallas rmsnorm backward (partial sums per row block) has no such
bound. The pair also shows a composite backward (`def_backward(composite=True)`).

The row kernels' configs are a preference order (runtime/sources/helion.py: each call runs the
first that tiles its rows): blocks of 32 rows where the row count allows (a grid step costs about
as much as moving a small block, bench/reports/helion_blocks_v5e.json), else 8.
"""

import helion
import helion.language as hl
import torch

ROWS = [helion.Config(block_sizes=[32]), helion.Config(block_sizes=[8])]


@helion.kernel(backend="pallas", configs=ROWS)
def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    m, _ = x.size()
    out = torch.empty_like(x)
    inv_rms = torch.empty([m], dtype=torch.float32, device=x.device)
    for tile_m in hl.tile(m):
        xf = x[tile_m, :].to(torch.float32)
        r = torch.rsqrt(torch.mean(xf * xf, dim=-1) + eps)
        out[tile_m, :] = (xf * r[:, None] * weight[:].to(torch.float32)).to(out.dtype)
        inv_rms[tile_m] = r
    return out, inv_rms


@helion.kernel(backend="pallas", configs=ROWS)
def rmsnorm_visible(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    m, _ = x.size()
    out = torch.empty_like(x)
    for tile_m in hl.tile(m):
        xf = x[tile_m, :].to(torch.float32)
        r = torch.rsqrt(torch.mean(xf * xf, dim=-1) + eps)
        out[tile_m, :] = (xf * r[:, None] * weight[:].to(torch.float32)).to(out.dtype)
    return out


@helion.kernel(backend="pallas", configs=ROWS)
def rmsnorm_dx(
    x: torch.Tensor, weight: torch.Tensor, inv_rms: torch.Tensor, grad_y: torch.Tensor
) -> torch.Tensor:
    m, _ = x.size()
    grad_x = torch.empty_like(x)
    for tile_m in hl.tile(m):
        r = inv_rms[tile_m]
        xhat = x[tile_m, :].to(torch.float32) * r[:, None]
        g = grad_y[tile_m, :].to(torch.float32) * weight[:].to(torch.float32)
        c = torch.mean(g * xhat, dim=-1)
        grad_x[tile_m, :] = (r[:, None] * (g - xhat * c[:, None])).to(grad_x.dtype)
    return grad_x


@helion.kernel(backend="pallas", config=helion.Config(block_sizes=[128]))
def rmsnorm_dweight(x: torch.Tensor, inv_rms: torch.Tensor, grad_y: torch.Tensor) -> torch.Tensor:
    _, n = x.size()
    grad_w = torch.empty([n], dtype=torch.float32, device=x.device)
    for tile_n in hl.tile(n):
        xhat = x[:, tile_n].to(torch.float32) * inv_rms[:][:, None]
        grad_w[tile_n] = torch.sum(grad_y[:, tile_n].to(torch.float32) * xhat, dim=0)
    return grad_w
