"""Statistics and timing on synthetic clocks: known medians and quantiles."""

import numpy as np
import pytest
import torch

from tpu_kernels.bench import timing
from tpu_kernels.bench.device import Device
from tpu_kernels.bench.stats import Summary, quantile

CPU = Device("cpu", "test", torch.device("cpu"), None)


def test_summary_matches_numpy():
    rng = np.random.default_rng(0)
    samples = list(rng.lognormal(size=37))
    s = Summary.of(samples)
    for name, q in (("median", 0.5), ("p10", 0.1), ("p25", 0.25), ("p75", 0.75), ("p90", 0.9)):
        assert getattr(s, name) == pytest.approx(np.quantile(samples, q))
    assert s.mean == pytest.approx(np.mean(samples))
    assert s.stdev == pytest.approx(np.std(samples, ddof=1))
    assert s.cv == pytest.approx(np.std(samples, ddof=1) / np.mean(samples))
    assert (s.min, s.max, s.n) == (min(samples), max(samples), 37)


def test_quantile_of_known_values():
    assert quantile([1.0, 2.0, 3.0, 4.0, 5.0], 0.5) == 3.0
    assert quantile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert quantile([10.0], 0.9) == 10.0
    with pytest.raises(ValueError):
        quantile([], 0.5)


class FakeClock:
    """A clock that advances only when the timed function runs: each call costs a
    scripted duration, so the harness's numbers are known exactly."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def workload(self, durations):
        it = iter(durations)

        def fn(*_):
            self.t += next(it)

        return fn


def test_warm_up_waits_out_compilation_then_samples_are_exact():
    clock = FakeClock()
    # first call "compiles" (1 s), then a steady 2 ms per call
    fn = clock.workload([1.0, 0.003, 0.0025] + [0.002] * 100000)
    settings = timing.Settings(rounds=7, min_sample_s=0.01, warmup_s=10, warmup_calls=3)
    result = timing.measure(CPU, {"k": (fn, [()])}, settings, now=clock)["k"]
    assert result.first_call_s == pytest.approx(1.0)
    assert result.calls_per_sample == 5  # 10 ms / 2 ms
    assert result.samples == pytest.approx([0.002] * 7)
    assert Summary.of(result.samples).median == pytest.approx(0.002)


def test_rounds_interleave_candidates_and_rotate_order():
    clock = FakeClock()
    order = []

    def make(name, cost):
        def fn(*_):
            order.append(name)
            clock.t += cost

        return fn

    settings = timing.Settings(rounds=3, min_sample_s=0.001, warmup_s=0, warmup_calls=2, max_warmup_calls=2, lead_in_s=0.001)
    timing.measure(CPU, {"a": (make("a", 0.001), [()]), "b": (make("b", 0.001), [()])}, settings, now=clock)
    timed = order[4:]  # after 2 warm-up calls each; each sample: one lead-in call, one timed
    assert timed == ["a", "a", "b", "b", "b", "b", "a", "a", "a", "a", "b", "b"]


def test_calls_cycle_through_input_sets():
    seen = []
    sets = [(i,) for i in range(3)]
    timing.time_calls(CPU, lambda i: seen.append(i), sets, calls=7, offset=1)
    assert seen == [1, 2, 0, 1, 2, 0, 1]


def test_input_sets_exceed_the_rotation_budget():
    made = []
    sets = timing.input_sets(
        lambda: made.append(1) or (len(made),),
        set_bytes=10 << 20,
        settings=timing.Settings(rotate_bytes=64 << 20),
        default_rotate=0,
    )
    assert len(sets) == 8  # ceil(64 / 10) + 1
    assert len(timing.input_sets(lambda: (1,), 1 << 30, timing.Settings(rotate_bytes=1), 0)) == 2
