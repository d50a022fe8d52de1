"""What a call on TPU tensors costs by the number and shape of its buffers: a probe of torch_tpu's
per-call cost on a TPU v5e.

The torch-on-TPU record (bench/reports/torch_tpu_v5e.json) has rmsnorm, whose kernel returns
(y, inv_rms), costing about twice what a one-output op costs per tiny call, and its forward in
the decoder layer's pieces far behind its JAX twin; the chip runner sees two-output calls cost
more in JAX alone too (tpu_kernels/chip/run.py, `_derive`). This script times bare
`torch.tpu.pallas.jax_op` calls that differ in one thing each, so the record says which:

  one            x * 2                                     (one output)
  two_same       x * 2, x * 3                              (two outputs of x's shape)
  two_column     x * 2, sum(x, -1, keepdims)               (a second, [rows, 1] float32 output)
  two_lanes      x * 2, the row sums broadcast to 128 lanes (a lane-dense second output)
  vector_input   x * w, w of shape [cols]                  (a 1-D input)
  row_input      x * w, w of shape [1, cols]               (the same as a 2-D input)
  pallas_one     a Pallas kernel: x * 2
  pallas_two     a Pallas kernel: x * 2 and its [rows, 1] row sums
  rmsnorm        tpu_kernels' rmsnorm op (its kernel returns y and inv_rms)

Each at [8, 128] float32 and [2048, 4096] bfloat16: n calls then one wait, the minimum of 5
rounds. Writes the record to --out (bench/reports/torch_tpu_outputs_v5e.json on the v5e).
Runs where the TPU suite runs (docs/devices.md, "The TPU suite").

    python3 bench/torch_tpu_outputs_probe.py --out FILE
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import torch
from jax.experimental import pallas as pl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SHAPES = {"8x128 f32": ((8, 128), torch.float32), "2048x4096 bf16": ((2048, 4096), torch.bfloat16)}


def one(x: jax.Array) -> jax.Array:
    return x * 2


def two_same(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    return x * 2, x * 3


def two_column(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    return x * 2, jnp.sum(x.astype(jnp.float32), -1, keepdims=True)


def two_lanes(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    s = jnp.sum(x.astype(jnp.float32), -1, keepdims=True)
    return x * 2, jnp.broadcast_to(s, x.shape[:-1] + (128,))


def vector_input(x: jax.Array, w: jax.Array) -> jax.Array:
    return x * w


def row_input(x: jax.Array, w: jax.Array) -> jax.Array:
    return x * w


def _blocks(x: jax.Array) -> tuple[int, pl.BlockSpec]:
    rows, cols = x.shape
    br = min(rows, 256)
    return br, pl.BlockSpec((br, cols), lambda i: (i, 0))


def _double(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2


def _double_and_sum(x_ref, o_ref, s_ref):
    x = x_ref[...]
    o_ref[...] = x * 2
    s_ref[...] = jnp.sum(x.astype(jnp.float32), -1, keepdims=True)


def pallas_one(x: jax.Array) -> jax.Array:
    br, spec = _blocks(x)
    return pl.pallas_call(_double, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          grid=(pl.cdiv(x.shape[0], br),), in_specs=[spec], out_specs=spec)(x)


def pallas_two(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    br, spec = _blocks(x)
    column = pl.BlockSpec((br, 1), lambda i: (i, 0))
    return pl.pallas_call(
        _double_and_sum,
        out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct((x.shape[0], 1), jnp.float32)),
        grid=(pl.cdiv(x.shape[0], br),), in_specs=[spec], out_specs=(spec, column),
    )(x)


FUNCTIONS: dict[str, Callable] = {f.__name__: f for f in (one, two_same, two_column, two_lanes, vector_input,
                                                         row_input, pallas_one, pallas_two)}


def _inputs(name: str, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    if name == "vector_input":
        return x, torch.randn(x.shape[-1], device=x.device).to(x.dtype)
    if name == "row_input":
        return x, torch.randn(1, x.shape[-1], device=x.device).to(x.dtype)
    return (x,)


def per_call_us(f: Callable[[], Any], n: int, rounds: int) -> float:
    for _ in range(3):
        f()
    torch.accelerator.synchronize()
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(n):
            f()
        torch.accelerator.synchronize()
        best = min(best, (time.perf_counter() - t0) / n)
    return round(best * 1e6, 1)


def measure(n: int = 100, rounds: int = 5) -> dict[str, Any]:
    from tpu_kernels.kernels import rmsnorm

    jax_op = torch.tpu.pallas.jax_op  # type: ignore[attr-defined]
    out: dict[str, Any] = {}
    for label, (shape, dtype) in SHAPES.items():
        x = torch.randn(*shape, device="tpu").to(dtype)
        row: dict[str, Any] = {}
        for name, fn in FUNCTIONS.items():
            op = jax_op(f"outputs_probe::{name}_{shape[0]}_{shape[1]}", fn)
            args = _inputs(name, x)
            try:
                row[name] = per_call_us(functools.partial(op, *args), n, rounds)
            except Exception as e:  # a refusal is a finding too
                row[name] = f"{type(e).__name__}: {e}"[:300]
        w = torch.randn(shape[-1], device="tpu").to(dtype)
        with torch.no_grad():
            row["rmsnorm"] = per_call_us(lambda: rmsnorm(x, w), n, rounds)
        out[label] = row
        print(label, json.dumps(row), flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    import torch_tpu  # noqa: F401  (installs torch.tpu)

    from tpu_kernels.runtime.devices import tpu as tpu_device

    tpu_device.torch_tpu_pallas()
    record = {
        "kind": "torch_tpu_outputs_probe",
        "date": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "commit": os.environ.get("TPU_KERNELS_COMMIT", ""),
        "device": torch.tpu.get_device_name(),  # type: ignore[attr-defined]
        "versions": {"torch": torch.__version__, "jax": jax.__version__,
                     "torch_tpu": getattr(torch_tpu, "__version__", "?")},
        "functions": sorted(FUNCTIONS) + ["rmsnorm"],
        "per_call_us": measure(),
    }
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
