"""bench/agreement.py on a tiny suite: every candidate gets a harness and a plain-loop figure."""

from tests.helpers import load_bench_script
from tpu_kernels.bench import timing
from tpu_kernels.bench.device import resolve

SUITE = '''
import time
import torch
from tpu_kernels import bench


def _sleep(x):
    time.sleep(0.002)  # a known cost: both timings must read about 2 ms
    return x + 1


def benchmarks(quick, device_type):
    return [
        bench.Benchmark(
            name="tiny",
            points=[{"n": 64}],
            inputs=lambda p, dev: (torch.randn(p["n"], device=dev),),
            candidates=lambda p: [
                bench.Candidate("sleepy", _sleep, primary=True),
                bench.Candidate("torch", lambda x: x + 1),
            ],
            reference=lambda x: x + 1,
        )
    ]
'''


def test_each_candidate_gets_both_figures(tmp_path, capsys):
    agreement = load_bench_script("agreement")
    suite = tmp_path / "tiny.py"
    suite.write_text(SUITE)
    settings = timing.Settings(rounds=3, min_sample_s=0.005, warmup_s=0.05, max_input_sets=2)
    rows = agreement.agreement([str(suite)], resolve("cpu"), settings)
    assert [r[2] for r in rows] == ["sleepy", "torch"]
    sleepy = rows[0]
    assert 0.002 <= sleepy[3] < 0.05 and 0.002 <= sleepy[4] < 0.05  # harness, loop: ~2 ms each (a sleep)
    out = capsys.readouterr().out
    assert "sleepy" in out and "ratio" in out
