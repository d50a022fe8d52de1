"""bench/reports/chip_v5e_attention_walk.json: what docs/performance.md ("The causal grid's
wasted steps") and pallas.py's comments say of it."""

import json
from pathlib import Path

import pytest

from tpu_kernels.kernels.attention import pallas

RECORD = Path(__file__).resolve().parents[2] / "bench/reports/chip_v5e_attention_walk.json"


@pytest.fixture(scope="module")
def record():
    return json.loads(RECORD.read_text())


def _best(row, name):
    return min(row[f"{name}_us{i}"] for i in (0, 1) if f"{name}_us{i}" in row)


def _tokens(row):
    return int(row["point"].split("[")[1].split(",")[3])


def test_the_table_walk_is_faster_at_every_long_draw_and_bitwise_equal(record):
    rows = record["runs"][2]["rows"]
    assert len(rows) == 20
    for r in rows:
        speed = _best(r, "before") / _best(r, "after")
        assert r["after_maxdiff"] == 0.0, r["point"]
        if _tokens(r) > 2048:
            assert 1.03 <= speed <= 1.18, (r["point"], r["what"], speed)
        else:
            assert 0.98 <= speed <= 1.03, (r["point"], r["what"], speed)


def test_masking_only_the_edge_blocks_alone_moved_nothing(record):
    for r in record["runs"][0]["rows"]:
        assert 0.96 <= _best(r, "before") / _best(r, "after") <= 1.02, r["point"]


def test_512_blocks_pay_for_the_forward_not_the_backward_at_9472_tokens(record):
    """The triangle rule's evidence: at 9472 tokens the walk's defaults were 1024-blocks (the
    covered length), and 512x512 ran the forward faster and the backward slower; the forward's
    rule now takes 512 there, the backward's 1024."""
    rows = {r["what"]: r for r in record["runs"][3]["rows"] if "9472" in r["point"]}
    assert _best(rows["forward"], "NonexNone") / _best(rows["forward"], "512x512") >= 1.05
    assert _best(rows["forward+backward"], "NonexNone") / _best(rows["forward+backward"], "512x512") < 1.0
    assert pallas._block("block_q", 9472, None, 8, triangle=True)[0] == 512
    assert pallas._block("block_q", 9472, None, 8)[0] == 1024
