"""bench/chip_decode_probe.py (the decode-shape read probe that runs on a TPU) on a CPU: with
torch blocked, in Pallas' interpreter at small shapes, every variant that computes the product
gets it right, each refusal is a recorded result, and only blocks that divide the shape run
(a grid of n // bn steps would skip columns and still read as fast). The committed v5e record
holds the figures docs/performance.md and the matmul notes cite."""

import json
from pathlib import Path

import pytest

from tests.bench.probes import run_without_torch

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "bench" / "reports" / "chip_v5e_decode_probe.json"


@pytest.mark.slow
def test_the_probe_runs_without_torch_and_every_product_is_right(tmp_path):
    rows = run_without_torch("chip_decode_probe.py", tmp_path / "probe.jsonl")
    assert {tuple(r["shape"]) for r in rows} == {(16, 1024, 2048), (64, 2048, 1024)}
    tags = [r["tag"] for r in rows]
    assert len(tags) == len(set(tags)), "a variant ran twice"
    for r in rows:
        assert "us" in r or "error" in r, r
        if "err" in r:
            assert r["err"] < 1e-2, r
    assert any("splitk" in t for t in tags) and any("fullk" in t for t in tags)


def test_the_committed_record_is_a_v5e_run_with_only_whole_grids():
    record = json.loads(RECORD.read_text())
    assert record["meta"]["device_kind"] == "TPU v5 lite"
    for r in record["rows"]:
        m, k, n = r["shape"]
        block = r["tag"].split("(")[1].split(")")[0].split(",") if "(" in r["tag"] else None
        if block:  # (M, bn, bk): a block that does not divide its dimension skips work
            assert n % int(block[1]) == 0 and k % int(block[2]) == 0, r["tag"]
    xla = [r for r in record["rows"] if r["tag"].endswith(" xla")]
    assert xla and all(r["err"] < 1e-2 for r in xla)
