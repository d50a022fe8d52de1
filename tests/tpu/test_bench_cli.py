"""`tpu-kernels bench --device tpu`, the main job on a TPU machine, on one op at one small
size: the report it writes names the chip and has finite times for tpu_kernels and for the
baseline, and tpu_kernels' results pass the report's correctness check.

The command runs as its own process, as a user runs it (`python -m tpu_kernels bench ...`),
while this pytest process holds no TPU (one process at a time may: test_cache_process.py); in
a run where this process holds the chip already, the same command runs in-process
(`tpu_kernels.cli.main`), and the record's figures say which ran. About 30 s: the process
start, the shipped kernel suite's softmax at its --quick size (1k x 1k) in float32 and bf16,
two timing rounds, beside torch and the Helion twin.
"""

from __future__ import annotations

import json
import math

from tests.tpu.test_cache_process import check_ran, child_env, run_on_chip, this_process_holds_the_chip

DEVICE = "tpu"
FAMILY = "softmax"
TIMEOUT_S = 240  # a cold process, compiles and two rounds: about 30 s


def _finite_positive(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def run_bench(tmp_path, monkeypatch, capsys) -> tuple[str, dict]:
    """Run the command (a child process, or in this one if it holds the chip); its report.json."""
    out = tmp_path / "report"
    args = ["bench", "kernels", "--device", DEVICE, "--quick", "--filter", f"^{FAMILY}$", "--rounds", "2"]
    args += ["--no-plots", "--out", str(out)]
    held = this_process_holds_the_chip()
    if held is None:
        child = run_on_chip(["-m", "tpu_kernels", *args], child_env(), cwd=tmp_path, timeout_s=TIMEOUT_S)
        check_ran(child, f"tpu-kernels {' '.join(args)}")
        how, text = f"child process ({child.wall_s:.1f} s, {child.attempts} attempt(s))", child.stdout
    else:
        from tpu_kernels.cli import main

        monkeypatch.chdir(tmp_path)
        status = main(args)
        text = capsys.readouterr().out
        assert status == 0, f"tpu-kernels {' '.join(args)} (in-process) exited {status}:\n{text[-3000:]}"
        how = f"in-process ({held})"
    report = out / "report.json"
    assert report.is_file(), f"no {report}; the command printed:\n{text[-3000:]}"
    return how, json.loads(report.read_text())


def test_bench_on_the_chip_reports_the_device_and_finite_times(tmp_path, monkeypatch, capsys, figures):
    how, report = run_bench(tmp_path, monkeypatch, capsys)
    figures["ran"] = how
    assert report["schema"] == "tpu_kernels.bench/1", report.get("schema")
    device = report["device"]
    figures["device"] = device.get("name")
    assert device["type"] == DEVICE and DEVICE in str(device.get("name", "")).lower(), device
    results = report["results"]
    assert results and {r["benchmark"] for r in results} == {FAMILY}, [r["benchmark"] for r in results]
    for r in results:
        where = f"{r['benchmark']} {r['point_id']}"
        cands = {c["name"]: c for c in r["candidates"]}
        figures[r["point_id"]] = {
            name: {
                "median_us": c["time"]["median"] * 1e6 if c.get("time") else None,
                "first_call_s": c.get("first_call_s"),
                "speedup": c.get("speedup"),
                "error": (c.get("error") or "")[:300] or None,
            }
            for name, c in cands.items()
        }
        baseline = r.get("baseline") or "torch"
        for name in ("tpu_kernels", baseline):
            c = cands.get(name)
            assert c is not None, f"{where}: no {name!r} candidate among {sorted(cands)}"
            assert c["error"] is None, f"{where} {name}: {c['error']}"
            assert c["time"] and _finite_positive(c["time"]["median"]), f"{where} {name}: time {c['time']}"
        ours = cands["tpu_kernels"]
        assert ours["primary"] and ours["check"] and ours["check"]["passed"], (
            f"{where}: check {ours['check']}"
        )
