"""What the Helion twins' block sizes and dot cost through torch on the TPU v5e: a probe.

The TPU suite records each Helion twin per call beside its Pallas op, at one bf16 shape
(`tests/tpu/test_helion.py::test_helion_twin_speed_is_recorded_beside_its_pallas_op`). This probe
times the same kernel functions (`<family>/helion_kernel.py`) at other `helion.Config` block sizes, each made a tpu_kernels op of
its own, and the Pallas op beside them, the same way (n calls, one element of each result read,
a wait; the best of `rounds`), at torch's default float32 setting ("highest"):

  add       scale_add's body (x + alpha * y) at row x column blocks
  rmsnorm   rmsnorm's forward body (y, inv_rms) at row blocks
  softmax   softmax's body at row blocks
  matmul    matmul's body at (m, n, k) blocks, two ways: float32 tiles into `torch.matmul` (the
            shipped body) and `hl.dot` of the input tiles into a float32 accumulator
  twins     each shipped Helion twin (its configs as shipped) and its Pallas op at the same
            shapes: per call, and what the chip ran over 5 calls of each (a jax.profiler trace:
            programs and ops by kind, bench/torch_tpu_wait_probe.device_programs)

Runs where the TPU suite runs (docs/devices.md, "The TPU suite"):

    python3 bench/helion_blocks_probe.py --out FILE [--sections add,rmsnorm,softmax,matmul]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import helion
import helion.language as hl
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tpu_kernels import tpu_kernel  # noqa: E402
from tpu_kernels.kernels import FAMILIES  # noqa: E402
from tpu_kernels.kernels.matmul import helion_kernel as matmul_kernel  # noqa: E402
from tpu_kernels.kernels.rmsnorm import helion_kernel as rmsnorm_kernel  # noqa: E402
from tpu_kernels.kernels.scale_add import helion_kernel as scale_add_kernel  # noqa: E402
from tpu_kernels.kernels.softmax import helion_kernel as softmax_kernel  # noqa: E402

SECTIONS = ("add", "rmsnorm", "softmax", "matmul", "twins")
SHAPES: dict[str, tuple] = {
    "add": ((4096, 4096), (4096, 4096)),
    "rmsnorm": (4096, 4096),
    "softmax": (4096, 4096),
    "matmul": (2048, 2048, 2048),
}
BLOCKS: dict[str, list[list[int]]] = {
    "add": [
        [8, 128],
        [64, 512],
        [128, 1024],
        [256, 1024],
        [256, 2048],
        [512, 1024],
        [512, 2048],
        [1024, 1024],
    ],
    "rmsnorm": [[8], [32], [64], [128], [256], [512]],
    "softmax": [[8], [32], [64], [128], [256], [512]],
    "matmul": [
        [128, 128, 128],
        [256, 256, 256],
        [256, 256, 512],
        [512, 512, 512],
        [512, 512, 256],
        [512, 1024, 512],
    ],
}


def matmul_hl_dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    m, k = a.size()
    _, n = b.size()
    out = torch.empty([m, n], dtype=a.dtype, device=a.device)
    for tile_m, tile_n in hl.tile([m, n]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = hl.dot(a[tile_m, tile_k], b[tile_k, tile_n], acc=acc)
        out[tile_m, tile_n] = acc.to(out.dtype)
    return out


BODIES: dict[str, dict[str, Any]] = {  # the shipped kernels' own functions, and one hl.dot body
    "add": {"body": scale_add_kernel.add.fn},
    "rmsnorm": {"body": rmsnorm_kernel.rmsnorm.fn},
    "softmax": {"body": softmax_kernel.softmax.fn},
    "matmul": {"f32_tiles": matmul_kernel.matmul.fn, "hl_dot": matmul_hl_dot},
}


def per_call_us(f, n: int = 5, rounds: int = 3) -> float:
    """As the suite's `_per_call_us`: n calls, one element of each result read, a wait."""
    first = f()
    (first[0] if isinstance(first, tuple) else first).reshape(-1)[0].cpu()
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        results = [f() for _ in range(n)]
        heads = [(r[0] if isinstance(r, tuple) else r).reshape(-1)[0] for r in results]
        torch.stack(heads).cpu()
        if torch.accelerator.is_available():
            torch.accelerator.synchronize()
        best = min(best, (time.perf_counter() - t0) / n)
    return round(best * 1e6, 1)


def inputs(section: str, dtype: torch.dtype, device: str) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    shape = SHAPES[section]
    if section == "add":
        return [torch.randn(s, generator=g).to(dtype).to(device) for s in shape]
    if section == "rmsnorm":
        return [
            torch.randn(shape, generator=g).to(dtype).to(device),
            torch.randn(shape[1:], generator=g).to(dtype).to(device),
        ]
    if section == "softmax":
        return [torch.randn(shape, generator=g).to(dtype).to(device)]
    m, k, n = shape
    return [
        torch.randn(m, k, generator=g).to(dtype).to(device),
        torch.randn(k, n, generator=g).to(dtype).to(device),
    ]


PALLAS = {"add": "scale_add", "rmsnorm": "rmsnorm", "softmax": "softmax", "matmul": "matmul"}


def run_section(section: str, device: str, dtypes: list[torch.dtype]) -> list[dict]:
    rows = []
    fam = FAMILIES[PALLAS[section]]
    for dtype in dtypes:
        args = inputs(section, dtype, device)
        with torch.no_grad():
            pallas_out = fam.op(*args, **fam.kwargs)
            pallas_us = per_call_us(lambda args=args: fam.op(*args, **fam.kwargs))
            ref = (pallas_out[0] if isinstance(pallas_out, tuple) else pallas_out).cpu().double()
            rows.append({"section": section, "dtype": str(dtype), "kernel": "pallas", "us": pallas_us})
            for body_name, body in BODIES[section].items():
                for blocks in BLOCKS[section]:
                    name = f"probe::{section}_{body_name}_{'x'.join(map(str, blocks))}_{str(dtype)[6:]}"
                    row: dict[str, Any] = {
                        "section": section,
                        "dtype": str(dtype),
                        "kernel": body_name,
                        "blocks": blocks,
                    }
                    try:
                        op = tpu_kernel(name)(
                            helion.kernel(backend="pallas", config=helion.Config(block_sizes=blocks))(body)
                        )
                        out = op(*args, **fam.kwargs)
                        got = (out[0] if isinstance(out, tuple) else out).cpu().double()
                        row["normwise_vs_pallas"] = float((got - ref).norm() / ref.norm())
                        row["us"] = per_call_us(lambda op=op, args=args, fam=fam: op(*args, **fam.kwargs))
                        row["over_pallas"] = round(row["us"] / pallas_us, 2)
                    except Exception as e:  # a config Helion or Mosaic refuses: say so, go on
                        row["error"] = f"{type(e).__name__}: {str(e)[:400]}"
                        traceback.print_exc()
                    print(json.dumps(row), flush=True)
                    rows.append(row)
    return rows


def run_twins(device: str, dtypes: list[torch.dtype]) -> list[dict]:
    """The shipped twins against their Pallas ops: per call, and the chip's programs and ops."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from torch_tpu_wait_probe import device_programs

    rows = []
    for section, family in PALLAS.items():
        fam = FAMILIES[family]
        for dtype in dtypes:
            args = inputs(section, dtype, device)
            for kernel, op in (("pallas", fam.op), ("helion", fam.helion_op())):
                row: dict[str, Any] = {
                    "section": "twins",
                    "family": family,
                    "dtype": str(dtype),
                    "kernel": kernel,
                }
                try:
                    with torch.no_grad():
                        row["us"] = per_call_us(lambda op=op, args=args, fam=fam: op(*args, **fam.kwargs))

                        def calls(op=op, args=args, fam=fam) -> None:
                            results = [op(*args, **fam.kwargs) for _ in range(5)]
                            heads = [(r[0] if isinstance(r, tuple) else r).reshape(-1)[0] for r in results]
                            torch.stack(heads).cpu()

                        row["device"] = device_programs(calls)
                except Exception as e:
                    row["error"] = f"{type(e).__name__}: {str(e)[:400]}"
                    traceback.print_exc()
                print(json.dumps(row), flush=True)
                rows.append(row)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--sections", default=",".join(SECTIONS))
    p.add_argument("--device", default="tpu")
    p.add_argument("--dtypes", default="bfloat16")
    a = p.parse_args()
    dtypes = [getattr(torch, d) for d in a.dtypes.split(",")]
    record: dict[str, Any] = {
        "commit": os.environ.get("TPU_KERNELS_COMMIT", "unknown"),  # the run's checkout
        "torch": torch.__version__,
        "helion": getattr(helion, "__version__", "?"),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "shapes": {k: str(v) for k, v in SHAPES.items()},
        "rows": [],
    }
    for section in a.sections.split(","):
        if section == "twins":
            record["rows"] += run_twins(a.device, dtypes)
        else:
            record["rows"] += run_section(section, a.device, dtypes)
        Path(a.out).write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
