"""bench/varlen.py in a quick mode: compile counts (not timings) with and without buckets."""

from pathlib import Path

import pytest

from tests.helpers import load_bench_script
from tpu_kernels.bench import discover

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def varlen():
    return load_bench_script("varlen")


def test_lengths_are_fixed_by_the_seed(varlen):
    lens = varlen.lengths(24, 512)
    assert lens == varlen.lengths(24, 512) and len(lens) == 24 and all(1 <= n <= 512 for n in lens)


def test_buckets_compile_once_per_bucket_and_change_no_result(varlen):
    lens = [1, 127, 128, 129, 200, 5]  # 6 lengths, 3 buckets: 8 rows, 128, 256
    exact = varlen.run("exact", lens, hidden=128, backward=True)
    bucketed = varlen.run("buckets", lens, hidden=128, backward=True)
    assert exact["executables"] == 6 and exact["backward_executables"] == 6
    assert bucketed["executables"] == 3 == varlen.expected_buckets(lens)
    assert bucketed["backward_executables"] == 3
    assert bucketed["sums"] == pytest.approx(exact["sums"], rel=1e-6)
    lines = varlen.report({"exact": [exact], "buckets": [bucketed]}, lens, 256)
    assert lines[0].startswith("6 random lengths in 1-256") and "3 buckets of rmsnorm's rows" in lines[0]
    assert lines[-1] == "goal: at most one compile per bucket: 3 executables for 3 buckets: met"


def test_it_is_not_a_harness_suite():
    assert ROOT / "bench" / "varlen.py" not in discover.suite_files(None, root=ROOT)
