"""Ops tuned by their own library's autotuner: Tokamax ops by `tokamax.autotune`, Helion
kernels by Helion's.

Tokamax: each captured call of a `tpu_kernels.tokamax` op becomes its JAX function
(`op.jax_function`, the op's statics bound) on the call's arrays, and `tokamax.autotune`
captures the Tokamax ops inside it and tunes each over Tokamax's own config space. The results
(Tokamax's `AutotuningResult`, one per Tokamax device kind) are saved in Tokamax's JSON format,
merged with what the file held (`tpu_kernels/tokamax/tuned.py` says where), and every
`tpu_kernels.tokamax` op body is traced inside them, so Tokamax picks the tuned configs.

Helion: each captured call of a Helion-kernel op runs `op.autotune(...)` for its device;
Helion keeps the winning config in its own on-disk cache, keyed by shapes, dtypes and hardware.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from tpu_kernels.autotuner.capture import Call
from tpu_kernels.tunables import table as tables


def tune_tokamax(calls: Sequence[Call]) -> dict[str, Any]:
    """Tokamax's autotuner over each call; -> {device kind: AutotuningResult}."""
    import jax
    import tokamax

    results: dict[str, Any] = {}
    for call in calls:
        op = call.op
        values = op.signature.bind(call.args, call.kwargs)
        tensors, statics = op.signature.split(values)
        named = {p.name: v for p, v in zip(op.signature.static_params, statics)}
        fn = op.jax_function(**named)
        arrays = [
            jax.dlpack.from_dlpack(t.detach().contiguous()) if isinstance(t, torch.Tensor) else t
            for t in tensors
        ]
        result = tokamax.autotune(fn, *arrays, progress_bar=False)
        kind = result.device_kind
        results[kind] = results[kind] | result if kind in results else result
        op.cache_clear()  # executables traced before the result applied are dropped
    return results


def save_tokamax(results: dict[str, Any], directory: str | Path | None) -> list[Path]:
    """Merge each device kind's result into its file (under the tables' lock)."""
    import tokamax

    from tpu_kernels.tokamax import tuned

    written = []
    for kind, result in results.items():
        path = tuned.write_path(kind, directory)
        path.parent.mkdir(parents=True, exist_ok=True)
        with tables.locked(path):
            if path.exists():
                try:
                    result = tokamax.AutotuningResult.loads(path.read_text()) | result
                except Exception as e:
                    raise tables.TuningTableError(
                        f"{path}: not a Tokamax autotuning result ({type(e).__name__}: {e}); move it away "
                        "or delete it, then tune again."
                    ) from None
            tables.replace_file(path, result.dumps())
        written.append(path)
    tuned.reload()
    return written


def tune_helion(calls: Sequence[Call]) -> list[str]:
    """Helion's autotuner over each call; -> a line per call saying what it chose."""
    lines = []
    for call in calls:
        device = call.device.type
        config = call.op.autotune(*call.args, device=device, **call.kwargs)
        lines.append(f"{call.op.name} on {device}: Helion chose {config}")
    return lines
