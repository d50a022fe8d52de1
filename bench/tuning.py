"""Autotuning, measured: softmax at its tuned block size against its declared default, per point.

At each point the suite first tunes `tpu_kernels.kernels.softmax` on that point's inputs
(`tpu_kernels.autotune`, the harness's quick settings, nothing saved), then times three
candidates: `tuned` (the op with the chosen block_rows; the report shows it beside the name),
`default` (the declared default, block_rows=256) and torch. The tuned candidate's speed-up over
`default` is what tuning bought at that point on this device; on a CPU the kernel runs in Pallas'
interpreter, so the figures show the method, not TPU speed (docs/autotuning.md).

    tpu-kernels bench tuning            # or: bash scripts/bench tuning
"""

from __future__ import annotations

import torch
from _common import randn

from tpu_kernels import autotuner, bench
from tpu_kernels.bench import timing
from tpu_kernels.kernels import softmax

# Rows that leave a choice: a few row blocks at every size (CPU sizes stay small: the interpreter)
SHAPES = {"cpu": [(512, 256), (2048, 128)], "accelerator": [(4096, 1024), (16384, 1024), (8192, 4096)]}
QUICK = {"cpu": [(512, 256)], "accelerator": [(4096, 1024)]}


def _inputs(p: dict, device: torch.device) -> tuple:
    return (randn(*p["shape"], dtype=p["dtype"], device=device, scale=3),)


def benchmarks(quick: bool, device_type: str) -> list[bench.Benchmark]:
    kind = "cpu" if device_type == "cpu" else "accelerator"
    chosen: dict[tuple, dict] = {}  # per point: the tuned config (candidates() is asked twice)

    def tuned_statics(p: dict) -> dict:
        key = (p["shape"], p["dtype"])
        if key not in chosen:
            x = _inputs(p, torch.device(device_type))
            result = autotuner.autotune(softmax, *x, save=False, settings=timing.quick(autotuner.TUNING))
            (outcome,) = result.outcomes
            chosen[key] = outcome.chosen or {}
        return chosen[key]

    def candidates(p: dict) -> list[bench.Candidate]:
        statics = tuned_statics(p)
        label = ", ".join(f"{k}={v}" for k, v in statics.items())
        default = dict(zip(softmax.tunables.names, softmax.tunables.default))
        return [
            bench.Candidate("tuned", lambda x: softmax(x, **statics), implementation=label, primary=True),
            bench.Candidate(
                "default",
                lambda x: softmax(x, **default),
                implementation=", ".join(f"{k}={v}" for k, v in default.items()),
            ),
            bench.Candidate("torch", lambda x: torch.softmax(x, -1)),
        ]

    return [
        bench.Benchmark(
            name="tuning_softmax",
            points=bench.grid(shape=SHAPES[kind], dtype=[torch.float32, torch.bfloat16]),
            # a CPU's default run: every size, one dtype (each point tunes first: ~10 s on a CPU)
            reduced_points=bench.grid(shape=SHAPES[kind], dtype=[torch.float32]),
            quick_points=bench.grid(shape=QUICK[kind], dtype=[torch.float32]),
            inputs=_inputs,
            candidates=candidates,
            reference=lambda x: torch.softmax(x, -1),
            reduction=lambda p: p["shape"][-1],
            baseline="default",
            description="softmax at its tuned block_rows against its declared default",
        )
    ]
