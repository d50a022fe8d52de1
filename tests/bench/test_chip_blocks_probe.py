"""bench/chip_blocks_probe.py (blocks the defaults did not try, and the gate sliced) on a CPU: with
torch blocked, in Pallas' interpreter at its small shapes, every side runs and computes what the
group's first side does; and in the committed v5e record every timed side agreed with its
group's first (XLA's gated product, JAX's flash attention or the template's first blocks), so
the times the defaults moved on are times of right results."""

import json
from pathlib import Path

import pytest

from tests.bench.probes import run_without_torch

RECORD = Path(__file__).resolve().parents[2] / "bench" / "reports" / "chip_v5e_blocks_probe.json"
NOT_THE_SAME_PRODUCT = {"floor"}  # matmul on g alone: the product without any gate, for its time


def _agree(rows: list[dict]) -> None:
    for r in rows:
        if r.get("section") == "meta" or r["side"] in NOT_THE_SAME_PRODUCT or "us" not in r:
            continue
        bound = 5e-3 if r.get("dtype") == "f32" and r["mode"] == "fwd" else 1e-2  # bf16 steps, summation order
        assert r["err_vs_first"] < bound, r


@pytest.mark.slow
def test_the_probe_runs_without_torch_and_every_side_agrees(tmp_path):
    rows = run_without_torch("chip_blocks_probe.py", tmp_path / "probe.jsonl", timeout=600)
    timed = [r for r in rows if r.get("section") in ("gated", "template")]
    assert {r["section"] for r in timed} == {"gated", "template"}
    assert all("us" in r for r in timed), [r for r in timed if "us" not in r]
    assert any(r["side"].startswith("k_chunk") for r in timed) and any(r["side"].startswith("m_chunk") for r in timed)
    _agree(timed)


def test_every_timed_side_in_the_record_computed_the_groups_result():
    record = json.loads(RECORD.read_text())
    assert record["meta"]["device"] == "TPU v5 lite"
    rows = record["rows"] + record["after"]["rows"]
    assert len([r for r in rows if "us" in r]) > 100
    _agree(rows)
