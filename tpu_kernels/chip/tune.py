"""Tuning spaces measured on the chip: each candidate config of a kernel at a shape, timed.

The record of a sweep (`"tune"` in the chip record) is what the v5e tables and the cost
model's fit are made from (docs/autotuning.md): per point, every config's compile verdict
and time, the baseline's time once.
"""

from __future__ import annotations

import itertools

from tpu_kernels.chip import grid, load
from tpu_kernels.chip.point import Point

# Large blocks beyond the op's own tuning space (matmul's pallas.Config.SPACE): the MXU-filling shapes
# the issue found fastest on a v5e (1024-class blocks with a raised scoped VMEM limit).
LARGE_BLOCKS = [
    (1024, 1024, 256), (1024, 1024, 512), (1024, 1024, 1024), (512, 1024, 512), (1024, 512, 512),
    (512, 1024, 1024), (1024, 512, 1024), (512, 512, 1024), (512, 512, 2048), (1024, 2048, 512),
    (2048, 1024, 512), (512, 2048, 512), (2048, 512, 512), (1024, 1024, 2048), (256, 1024, 1024),
    (256, 2048, 1024), (2048, 1024, 256), (1024, 2048, 256),
]



def decode_blocks(m: int, k: int, n: int) -> list[tuple[int, int, int]]:
    """Where M is a decode batch (<= 64) the weight's read is the whole cost: blocks that read
    it in long contiguous runs (all of N per row, or 4096 of it) and few grid steps."""
    if m > 64:
        return []
    return [(256, n, 128), (256, n, 256), (256, n, 512), (256, 4096, 512), (256, 4096, 1024),
            (256, 4096, 2048), (256, 2048, 2048), (256, 1024, 4096)]


def matmul_configs(m: int, k: int, n: int, itemsize: int) -> list[dict[str, int]]:
    """The op's tuning space, `LARGE_BLOCKS` and (for decode shapes) `decode_blocks`, less
    those whose buffers pass the 48 MiB a shipped kernel may raise its limit to; blocks past a
    dimension collapse to it, so duplicates are dropped."""
    _vmem = load.shared("_vmem")
    pallas = load.family("matmul").pallas
    mm, space = pallas.blocks, pallas.Config.space()
    space = [(bm, bn, bk) for bm in space["block_m"] for bn in space["block_n"] for bk in space["block_k"]]
    seen, configs = set(), []
    for bm, bn, bk in space + LARGE_BLOCKS + decode_blocks(m, k, n):
        em, en, ek = min(bm, m), min(bn, n), min(bk, k)
        if (em, en, ek) in seen or not _vmem.fits(mm.vmem_need(em, en, ek, itemsize)):
            continue
        seen.add((em, en, ek))
        configs.append({"block_m": bm, "block_n": bn, "block_k": bk})
    return configs


def matmul_sweep(shapes: list[tuple[int, int, int, str]]) -> list[tuple[str, list[Point]]]:
    mm = load.family("matmul")
    xla = {"xla": mm.jax_reference.matmul_jax}
    out = []
    for m, k, n, dt in shapes:
        cands = [mm.chip.point(mm.pallas.matmul, xla, "matmul", m, k, n, dt, c, section="tune")
                 for c in matmul_configs(m, k, n, 2 if dt == "bf16" else 4)]
        out.append((f"matmul/{dt}[{m},{k},{n}]", cands))
    return out


ROW_CANDIDATES = (8, 16, 32, 64, 128, 256, 512, 1024, 2048)


def row_sweep(shapes: list[tuple[str, int, int, str]]) -> list[tuple[str, list[Point]]]:
    out = []
    for family, rows, d, dt in shapes:
        cands = []
        for br in ROW_CANDIDATES:
            if br > rows:
                continue
            cands += grid.family_points(family, [(rows, d)], (dt,), {"block_rows": br})
        out.append((f"{family}/{dt}[{rows},{d}]", cands))
    return out


def attention_sweep(shapes: list[tuple[int, int, int, int, bool]], dt: str = "bf16") -> list[tuple[str, list]]:
    fa = load.template("flash_attention")
    out = []
    for b, h, s, d, causal in shapes:
        cands = []
        for bq, bk in itertools.product((128, 256, 512, 1024), (128, 256, 512, 1024)):
            if bq > s or bk > s:
                continue
            cands += grid.attention_points(fa, [(b, h, s, d)], (dt,), (causal,), {"block_q": bq, "block_k": bk},
                                             baselines=False)
        out.append((f"flash_attention/{dt}[{b},{h},{s},{d}]" + ("/causal" if causal else ""), cands))
    return out


__all__ = ["attention_sweep", "matmul_configs", "matmul_sweep", "row_sweep"]
