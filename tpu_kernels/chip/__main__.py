"""`python -m tpu_kernels.chip`: the shipped kernels and Pallas templates on the attached TPU.

    python -m tpu_kernels.chip --out bench/reports/chip_v5e.json            # the whole grid
    python -m tpu_kernels.chip --sections grid,precision --quick --interpret  # a CPU smoke run

Needs JAX alone (no torch): it runs on a TPU host with Python >= 3.11 and JAX >= 0.10.2
from a source checkout (docs/devices.md). Sections: `grid` (every kernel at model shapes, at
its defaults, against XLA), `precision` (float32 matmul at each matmul-precision setting),
`layer` (a decoder layer from the shipped kernels against one from XLA and JAX's flash
attention), `tune` (tuning spaces), `corpus` (compile verdicts of the calibration corpus of
`tpu-kernels check`), `drawn` (points drawn at run time from public model configs, from
`--seed`: chip/drawn.py), `drawn_layer` (the decoder layer at three drawn configs). Each
section's rows go into one JSON record, with the chip, the JAX and
libtpu versions and the commit; `--merge` adds sections to an existing record.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

SECTIONS = ("grid", "precision", "layer", "tune", "corpus", "drawn", "drawn_layer", "drawn_tune")


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m tpu_kernels.chip", description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="bench/reports/chip_v5e.json", help="the JSON record to write")
    ap.add_argument("--sections", default="grid,precision,layer", help=f"comma-separated, of {', '.join(SECTIONS)}")
    ap.add_argument("--grid", default="rows,matmul,attention,loss,template", help="the grid's kinds of point")
    ap.add_argument("--quick", action="store_true", help="a few small points of each kind")
    ap.add_argument("--interpret", action="store_true", help="no TPU: run Pallas in its CPU interpreter")
    ap.add_argument("--rounds", type=int, default=5, help="timing rounds per function (min is kept)")
    ap.add_argument("--budget", type=float, default=540.0, help="seconds; sections stop starting points after it")
    ap.add_argument("--merge", action="store_true", help="keep the record's other sections")
    ap.add_argument("--update", action="store_true",
                    help="keep the record, and replace only the rows measured now, by id (tpu_kernels/chip/records.py)")
    ap.add_argument("--only", default="", help="grid points and corpus calls whose id matches this regular expression, drawn layers whose model name does (all if empty)")
    ap.add_argument("--commit", default=os.environ.get("TPU_KERNELS_COMMIT", ""), help="the commit measured")
    ap.add_argument("--statics", default="", help='JSON: kernel defaults to override, e.g. {"matmul": {"block_m": 256}}')
    ap.add_argument("--tune", default="", help="the tuning groups to run, in this order: comma-separated "
                    "substrings of their labels (e.g. 'matmul/f32,softmax/'); all when empty")
    ap.add_argument("--label", default="", help="a name for this run in the record (e.g. before, after)")
    ap.add_argument("--seed", type=int, default=None,
                    help="the draw of the drawn sections (a fresh one, recorded, when unset)")
    return ap.parse_args(argv)


def _versions() -> dict[str, Any]:
    import jax

    backend = jax.extend.backend.get_backend() if hasattr(jax, "extend") else None
    device = jax.devices()[0]
    return {
        "device_kind": device.device_kind,
        "platform": device.platform,
        "devices": len(jax.devices()),
        "jax": jax.__version__,
        "platform_version": getattr(backend, "platform_version", ""),
        "python": platform.python_version(),
    }


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    sections = [s for s in args.sections.split(",") if s]
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        print(f"python -m tpu_kernels.chip: unknown section(s) {sorted(unknown)}; known: {SECTIONS}", file=sys.stderr)
        return 2
    import jax

    if args.interpret:
        from tpu_kernels.chip import probes

        probes.use_interpreter()
    elif jax.default_backend() != "tpu":
        print(
            f"python -m tpu_kernels.chip: JAX's backend is {jax.default_backend()!r}, not a TPU "
            "(JAX_PLATFORMS? run with --interpret for a CPU smoke run)",
            file=sys.stderr,
        )
        return 2
    from tpu_kernels.chip import measure, records
    from tpu_kernels.chip import sections as run_sections

    start = time.monotonic()
    deadline = start + args.budget
    meta = _versions()
    peaks = measure.peaks(meta["device_kind"])
    floor_s = measure.dispatch_floor()
    print(f"== {meta['device_kind']} x{meta['devices']}, JAX {meta['jax']}, {meta['platform_version']}; "
          f"dispatch floor {floor_s * 1e6:.0f} us", flush=True)
    out = Path(args.out)
    record: dict[str, Any] = {}
    if (args.merge or args.update) and out.exists():
        record = json.loads(out.read_text())
    record.setdefault("meta", {}).update(meta)
    record["meta"].update({"commit": args.commit, "dispatch_floor_s": floor_s, "peaks": peaks,
                           "quick": args.quick, "interpret": args.interpret})
    statics = json.loads(args.statics) if args.statics else {}
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little") % 1_000_000
    if any(s.startswith("drawn") for s in sections):
        record["meta"]["seed"] = seed
        print(f"== drawn sections: seed {seed}", flush=True)
    context = run_sections.Context(peaks=peaks, floor_s=floor_s, rounds=args.rounds, deadline=deadline,
                                   quick=args.quick, statics=statics, grid=tuple(args.grid.split(",")),
                                   tune_only=tuple(t for t in args.tune.split(",") if t), only=args.only,
                                   seed=seed)
    for name in sections:
        t0 = time.monotonic()
        print(f"== {name}", flush=True)
        key = f"{name}:{args.label}" if args.label else name

        def save(rows: list, key: str = key, t0: float = t0, before: Any = record.get(key)) -> None:
            section = {"rows": rows, "seconds": round(time.monotonic() - t0, 1), "commit": args.commit}
            record.pop(key, None)
            if args.update and before is not None:
                record[key] = before
            records.update(record, key, section)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(record, indent=1, sort_keys=True, default=str) + "\n")

        context.save = save
        save(getattr(run_sections, name)(context))
    print(f"== wrote {out} in {time.monotonic() - start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
