"""Markdown tables from the chip runner's records (docs/performance.md, "On a TPU v5e").

Torch-free like the rest of tpu_kernels.chip, so a TPU host can print them too:
`python -m tpu_kernels.chip.report bench/reports/chip_v5e.json`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

# The configs the shipped kernels used by default before they were sized to the chip: the
# "before" column of `before_after` reads them from the tuning record.
OLD_DEFAULTS = {
    "matmul": {"block_m": 256, "block_n": 256, "block_k": 256},
    "rows": {"block_rows": 256},
    "attention": {"block_q": 128, "block_k": 128},
}


def _us(t: float | None) -> str:
    if t is None:
        return "-"
    return f"{t * 1e3:.2f} ms" if t >= 1e-3 else f"{t * 1e6:.0f} us"


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _vs(row: dict, name: str) -> str:
    """The speed against a baseline, and where the point was also timed in one program, that
    speed too (¶)."""
    inside = row.get(f"speed_in_program_vs_{name}")
    return _x(row.get(f"speed_vs_{name}")) + (f" ({inside:.2f}x ¶)" if inside else "")


def _err(side: dict) -> str:
    e = side.get("error_vs_f64")
    return "-" if e is None else f"{e:.1e}"


def _verdict(side: dict) -> str:
    if not side.get("compiles"):
        text = side.get("error", "")
        return "**fails**: " + ("VMEM OOM" if "Vmem" in text or "vmem" in text else text[:60])
    if "run_error" in side:
        return "**run error**"
    return "ok"


def _speed(row: dict) -> str:
    t = row["pallas"].get("time_s")
    if t is None:
        return "-"
    if "share_of_peak" not in row:
        return "-"
    if row["bound"] == "compute":
        return f"{row['tflops']:.0f} TF/s ({100 * row['share_of_peak']:.0f}%)"
    return f"{row['gbps']:.0f} GB/s ({100 * row['share_of_peak']:.0f}%)"


def _marks(record: dict[str, Any]) -> dict[str, str]:
    """Row id -> its mark ("†1", ...) where the record says the row was measured before a later
    change to that kernel's defaults (`meta.superseded`)."""
    return {i: f" †{n}" for n, s in enumerate(record["meta"].get("superseded", []), 1) for i in s["ids"]}


def superseded(record: dict[str, Any]) -> str:
    """The marks' legend: what changed after each group of rows was measured."""
    lines = [f"- †{n} ({len(s['ids'])} rows, measured at {s['commit'][:10]}): since then {s['change']}."
             for n, s in enumerate(record["meta"].get("superseded", []), 1)]
    if not lines:
        return ""
    return "Rows measured before a later change to their code, not measured again:\n\n" + "\n".join(lines)


def grid_table(record: dict[str, Any], key: str = "grid") -> str:
    lines = [
        "| kernel | dtype | shape | compiles | error vs f64 (kernel / XLA) | time | XLA | vs XLA | JAX flash | vs JAX flash | share of peak |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    marks = _marks(record)
    for r in record[key]["rows"]:
        p, x, f = r["pallas"], r.get("xla", {}), r.get("jax_flash", {})
        shape = "x".join(str(s) for s in r["shape"])
        extra = (" causal" if r["statics"].get("causal") else "") + marks.get(r["id"], "")
        flag = (" (dispatch-bound)" if r.get("dispatch_bound") else "") + (" ‡" if r.get("rotated") else "")
        lines.append(
            f"| {r['kernel']}{extra} | {r['dtype']} | {shape} | {_verdict(p)} | {_err(p)} / {_err(x)} | "
            f"{_us(p.get('time_s'))}{flag} | {_us(x.get('time_s'))} | {_vs(r, 'xla')} | "
            f"{_us(f.get('time_s'))} | {_vs(r, 'jax_flash')} | {_speed(r)} |"
        )
    looped = [r for r in record[key]["rows"] if r.get("in_program_calls")]
    if looped:
        lines += ["", f"¶ A dispatch-bound point timed again as {looped[0]['in_program_calls']} calls inside one program, "
                  "every side alike: the speed from the kernels' own time per call, without the machine's per-call "
                  "dispatch, which grows with the outputs a call returns (tpu_kernels/chip/measure.py)."]
    cycled = [r for r in record[key]["rows"] if r.get("rotated")]
    if cycled:
        lines += ["", f"‡ Timed cycling through {cycled[0]['rotated']} on-chip copies of the inputs, every side alike "
                  "(each side's same-input time is in the record): XLA compiled a cross-program prefetch into a side, "
                  "which keeps part of an input on chip between calls that pass the same buffer "
                  "(tpu_kernels/chip/measure.py)."]
    return "\n".join(lines)


def grid_summary(record: dict[str, Any], key: str = "grid") -> str:
    rows = record[key]["rows"]
    failed = [r["id"] for r in rows if not r["pallas"].get("compiles") or "run_error" in r["pallas"]]
    # dispatch-bound points (within 2x of the machine's per-call floor) say little of the kernel
    bw = [r for r in rows if r["bound"] == "bandwidth" and r["section"] == "rows" and r.get("speed_vs_xla")
          and not r.get("dispatch_bound")]
    big = [r for r in bw if r["bytes"] >= 16 * 2**20]
    marks = _marks(record)
    below = [r["id"] + marks.get(r["id"], "") for r in bw if r["speed_vs_xla"] < 1.0]
    low_peak = [r["id"] + marks.get(r["id"], "") for r in big if r.get("share_of_peak", 0) < 0.75]
    parts = [f"{len(rows)} points, {len(rows) - len(failed)} compile and run"]
    if failed:
        parts.append("fail: " + ", ".join(failed))
    parts.append(f"row kernels below 1.0x XLA (of {len(bw)} not dispatch-bound): {len(below)}" + (f" ({', '.join(below)})" if below else ""))
    parts.append(f"row kernels from 16 MiB of traffic under 75% of HBM peak (of {len(big)}): {len(low_peak)}"
                 + (f" ({', '.join(low_peak)})" if low_peak else ""))
    return "; ".join(parts) + "."


def precision_table(record: dict[str, Any]) -> str:
    lines = ["| setting | traced with | compiles | error vs f64 (kernel / XLA) | time | XLA | vs XLA |", "|---|---|---|---|---|---|---|"]
    for r in record["precision"]["rows"]:
        p, x = r["pallas"], r.get("xla", {})
        lines.append(f"| {r['precision']} | `{r['traced_with']}` | {_verdict(p)} | {_err(p)} / {_err(x)} | "
                     f"{_us(p.get('time_s'))} | {_us(x.get('time_s'))} | {_x(r.get('speed_vs_xla'))} |")
    return "\n".join(lines)


def attention_of(row: dict[str, Any]) -> str:
    """The attention a decoder-layer row's own side ran (chip/layer.py's ATTENTION; rows from
    before it named one ran the flash-attention template), and how it took its heads where the
    row says (`attention_layout`: "by token", read in place)."""
    name = row.get("attention", "flash template")
    return f"{name}, {row['attention_layout']}" if row.get("attention_layout") else name


def layer_attention(record: dict[str, Any]) -> str:
    """What the grid record's layer rows attended with: one name, or each run's where they differ."""
    found = sorted({attention_of(r) for k in record if k.startswith("layer") for r in record[k]["rows"]})
    names = {"flash template": "flash-attention template", "attention family": "attention family"}
    return " or ".join(names.get(f, f) for f in found) or "attention family"


def layer_table(record: dict[str, Any]) -> str:
    lines = ["| run | layer | shipped kernels | XLA + JAX flash | speed | error vs f64 (ours / XLA) |", "|---|---|---|---|---|---|"]
    marks = _marks(record)
    for key in sorted(k for k in record if k.startswith("layer")):
        label = (key.partition(":")[2] or "defaults")
        for r in record[key]["rows"]:
            label_r = label + marks.get(r["id"], "")
            kind = "forward + backward" if r["backward"] else "forward"
            err = (f"{r['error_ours_vs_f64']:.1e} / {r['error_xla_vs_f64']:.1e}" if "error_ours_vs_f64" in r
                   else f"grads vs XLA layer's: {r.get('error_grads_ours_vs_xla', float('nan')):.1e}")
            ours = f"{r['ours_ms']:.2f} ms" if "ours_ms" in r else "**fails**"
            lines.append(f"| {label_r} | {kind} | {ours} | {r.get('xla_ms', '-')} ms | {_x(r.get('speed_vs_xla'))} | {err} |")
    return "\n".join(lines)


def _family(kernel: str) -> str:
    if kernel.startswith("matmul"):
        return "matmul"
    if "flash_attention" in kernel:
        return "attention"
    return "rows"


def before_after(tune: dict[str, Any], record: dict[str, Any]) -> str:
    """The old defaults (from the tuning sweep) against today's (the grid), where both measured
    the same kernel, dtype and shape."""
    grid = {(r["kernel"], r["dtype"], tuple(r["shape"]), bool(r["statics"].get("causal"))): r for r in record["grid"]["rows"]}
    lines = ["| kernel | dtype | shape | before: old default | after: default | speed-up | after vs XLA / JAX flash |",
             "|---|---|---|---|---|---|---|"]
    for r in tune["tune"]["rows"]:
        old = OLD_DEFAULTS[_family(r["kernel"])]
        if any(r["statics"].get(k) != v for k, v in old.items()):
            continue
        causal = bool(r["statics"].get("causal"))
        new = grid.get((r["kernel"], r["dtype"], tuple(r["shape"]), causal))
        if new is None:
            continue
        tb, ta = r["pallas"].get("time_s"), new["pallas"].get("time_s")
        before = _us(tb) if tb else _verdict(r["pallas"])
        ref = new.get("speed_vs_jax_flash") or new.get("speed_vs_xla")
        lines.append(f"| {r['kernel']}{' causal' if causal else ''} | {r['dtype']} | {'x'.join(map(str, r['shape']))} | "
                     f"{before} | {_us(ta) if ta else _verdict(new['pallas'])} | {_x(tb / ta) if tb and ta else '-'} | {_x(ref)} |")
    return "\n".join(lines)


def _range(values: list[float]) -> str:
    if not values:
        return "-"
    values = sorted(values)
    return f"median {values[len(values) // 2]:.2f}x ({values[0]:.2f}-{values[-1]:.2f}x over {len(values)} points)"


def headline(record: dict[str, Any]) -> str:
    """README's table of TPU figures, from the record (dispatch-bound points left out)."""
    rows = [r for r in record["grid"]["rows"] if not r.get("dispatch_bound")]
    mm = [r["speed_vs_xla"] for r in rows if r["kernel"] == "matmul" and r["dtype"] == "bf16" and r.get("speed_vs_xla")]
    row = [r["speed_vs_xla"] for r in rows if r["section"] == "rows" and r.get("speed_vs_xla")]
    fa = [r["speed_vs_jax_flash"] for r in rows if r["kernel"] == "template.flash_attention" and r.get("speed_vs_jax_flash")]
    fab = [r["speed_vs_jax_flash"] for r in rows if r["kernel"] == "template.flash_attention_fwd_bwd"
           and r.get("speed_vs_jax_flash")]
    inside = [r.get("speed_in_program_vs_jax_flash") or r["speed_in_program_vs_xla"] for r in record["grid"]["rows"]
              if r.get("speed_in_program_vs_jax_flash") or r.get("speed_in_program_vs_xla")]
    grid = record["grid"]["rows"]
    ok = sum(r["pallas"].get("compiles", False) and "run_error" not in r["pallas"] for r in grid)
    layer = {r["backward"]: r.get("speed_vs_xla") for r in record.get("layer", {}).get("rows", [])}
    marks = _marks(record)
    stale = sum(r["id"] in marks for r in grid)
    layer_mark = " (†: measured before a later change)" if any(
        r["id"] in marks for r in record.get("layer", {}).get("rows", [])) else ""
    lines = [
        "| on a TPU v5e, at the kernels' defaults | figure |",
        "|---|---|",
        f"| grid points that compile and run (model shapes, forward and backward, bf16 and float32) | {ok} of {len(grid)} |",
        f"| shipped matmul (bf16) over XLA's `jnp.dot` | {_range(mm)} |",
        f"| row kernels (rmsnorm, softmax, scale_add) over XLA | {_range(row)} |",
        f"| flash-attention template over JAX's Pallas flash attention, forward | {_range(fa)} |",
        f"| the same, forward + backward | {_range(fab)} |",
        f"| dispatch-bound points, timed as calls in one program: kernel over XLA (JAX flash for attention) | {_range(inside)} |",
        f"| a decoder layer from these kernels over one from XLA and JAX's flash attention | forward {_x(layer.get(False))}, forward + backward {_x(layer.get(True))}{layer_mark} |",
    ]
    if stale:
        lines.append(f"| grid points measured before a later change to their defaults, not measured again (†, docs/performance.md) | {stale} of {len(grid)} |")
    return "\n".join(lines)


def provenance(record: dict[str, Any]) -> str:
    from tpu_kernels.chip import records

    m = record["meta"]
    counts = records.commits(record)
    at = ", ".join(f"{c[:10]} ({n} rows)" for c, n in sorted(counts.items(), key=lambda cn: -cn[1]))
    return (f"_Measured by `python -m tpu_kernels.chip` on one {m['device_kind']} (JAX {m['jax']}, Python {m['python']}), "
            f"tpu_kernels {at or m.get('commit', '')[:10]}; dispatch floor {m['dispatch_floor_s'] * 1e6:.0f} us per call. "
            "Regenerate: docs/devices.md, \"On a TPU machine without torch\"._")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    record = json.loads(Path(argv[0] if argv else "bench/reports/chip_v5e.json").read_text())
    if "grid" in record:
        print(grid_summary(record), "\n", grid_table(record), sep="\n")
    if "precision" in record:
        print("", precision_table(record), sep="\n")
    if any(k.startswith("layer") for k in record):
        print("", layer_table(record), sep="\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
