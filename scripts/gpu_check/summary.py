"""scripts/gpu-check's last step: the CUDA tests' counts and the benchmark's figures, in a few lines.

    python scripts/gpu_check/summary.py --junit OUT/tests.xml --report OUT/bench/report.json

Either file may be missing (its step did not run, or was stopped): the summary says so.
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def _time(s: float | None) -> str:
    if s is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s / 1e-9:.3g} ns"


def test_lines(junit: Path | None) -> list[str]:
    """The CUDA tests' counts, and each failure's and skip's name with its first line."""
    if junit is None or not junit.exists():
        return ["tests: not run (no JUnit report)"]
    root = ET.parse(junit).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    lines = [
        f"tests: {passed} passed, {counts['failures']} failed, {counts['errors']} errors, "
        f"{counts['skipped']} skipped (of {counts['tests']})"
    ]
    for case in root.iter("testcase"):
        for kind in ("failure", "error", "skipped"):
            el = case.find(kind)
            if el is not None:
                first = (el.get("message") or el.text or "").strip().splitlines()[:1]
                lines.append(f"  {kind}: {case.get('name')}: {first[0][:200] if first else ''}")
    return lines


def bench_lines(report: Path | None) -> list[str]:
    """Per point: each candidate's median, tpu_kernels against the bare jitted JAX call (what the
    torch bridge costs) and against torch, the achieved TFLOP/s or GB/s, and every error."""
    if report is None or not report.exists():
        return ["benchmark: not run (no report)"]
    r = json.loads(report.read_text())
    dev = r.get("device", {})
    lines = [f"benchmark on {dev.get('name')} ({dev.get('type')}); timer: {r.get('timer')}"]
    for res in r.get("results", []):
        cands = {c["name"]: c for c in res["candidates"]}
        medians = {n: (c.get("time") or {}).get("median") for n, c in cands.items()}
        parts = [f"{n} {_time(m)}" for n, m in medians.items() if m]
        line = f"  {res['benchmark']} {res['point_id']}: " + ", ".join(parts)
        ours = medians.get("tpu_kernels")
        if ours and medians.get("jax"):
            line += f"; tpu_kernels/jax {ours / medians['jax']:.2f}x"
        if ours and medians.get("torch"):
            line += f", tpu_kernels/torch {ours / medians['torch']:.2f}x"
        tp = (cands.get("tpu_kernels") or {}).get("throughput") or {}
        for key, unit, pct in (("tflops", "TFLOP/s", "pct_peak_flops"), ("gbps", "GB/s", "pct_peak_bw")):
            if tp.get(key):
                line += f"; {tp[key]:.4g} {unit}" + (f" ({tp[pct]:.0f}% of peak)" if tp.get(pct) else "")
        lines.append(line)
        for n, c in cands.items():
            if c.get("error"):
                lines.append(f"    {n} failed: {c['error'][:200]}")
            elif c.get("check") and not c["check"].get("passed", True):
                lines.append(
                    f"    {n} wrong: error {c['check'].get('error'):.3g} > {c['check'].get('allowed'):.3g}"
                )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--junit", type=Path)
    p.add_argument("--report", type=Path)
    args = p.parse_args(argv)
    print("\n".join(test_lines(args.junit) + bench_lines(args.report)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
