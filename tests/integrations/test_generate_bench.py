"""bench/generate.py: its child counts compiles per bucket, its table reads the figures right,
and the command harness does not pick it up as a suite (it runs fresh processes)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
pytest.importorskip("transformers")
import torch  # noqa: E402

from tests.helpers import load_bench_script  # noqa: E402
from tpu_kernels.bench import discover  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def generate():
    return load_bench_script("generate")


def test_child_counts_attention_compiles_per_bucket(generate):
    from tpu_kernels.tokamax.attention.op import dot_product_attention_op

    dot_product_attention_op.cache_clear()
    r = generate.child("tpu_kernels", new_tokens=4, repeat=1, threads=torch.get_num_threads())
    # prefill and decode shapes of one bucket; the 13-token prompt is in the same bucket
    assert (r["first_compiles"], r["new_len_compiles"]) == (2, 0)
    assert r["first_compiles_all_ops"] >= r["first_compiles"]
    assert r["first_s"] > 0 and r["tokens_per_s"] > 0


def test_table(generate):
    row = dict(first_s=2.0, first_compiles=2, first_compiles_all_ops=6, new_len_s=0.5, new_len_compiles=0,
               new_len_compiles_all_ops=2, tokens_per_s=123.4)  # fmt: skip
    text = generate.table({"sdpa": {**row, "tokens_per_s": 271.0}, "tpu_kernels": row})
    assert "| sdpa | 2.00 s | - | 0.50 s | - | 271 |" in text
    assert "| tpu_kernels | 2.00 s | 2 (6) | 0.50 s | 0 (2) | 123 |" in text


def test_it_is_not_a_harness_suite():
    assert ROOT / "bench" / "generate.py" not in discover.suite_files(None, root=ROOT)
