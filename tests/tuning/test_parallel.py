"""The tuner's parallel build (autotuner/point.py, `workers=`): candidates are compiled ahead in a
thread pool, then run, checked and timed one at a time; the choice, the report's rows and the
failure records are those of the serial run (workers=1) for the same measurements."""

import threading

import pytest

from tpu_kernels.autotuner import autotune, point, tune_calls
from tpu_kernels.autotuner.capture import Call
from tpu_kernels.autotuner.result import _candidate_rows
from tpu_kernels.bench import timing
from tpu_kernels.runtime import prebuild

from ..helpers import hypothesis_settings, rand, uname
from .kernels import make_op

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

SETTINGS = hypothesis_settings(6, 12)  # each example compiles every candidate twice
FAST = timing.Settings(rounds=3, min_sample_s=0.001, warmup_s=0.01, lead_in_s=0.001)
BLOCKS = (8, 16, 32, 64, 128, 256)


class StubTimer:
    """Deterministic timings (`base[block_rows]`, +-1%), which also checks that no build is in
    flight in any thread while it times: timing never overlaps a compile."""

    def __init__(self, base):
        self.base, self.asked, self.overlapped = base, [], []

    def __call__(self, device, fns, settings):
        self.overlapped.append(prebuild.ACTIVE)
        out = {}
        for name in fns:
            self.asked.append(name)
            t = self.base[int(name.split("=")[1])]
            out[name] = timing.Timing([t * 0.99, t, t * 1.01, t, t], 1, 1, t)
        return out


X = rand(300, 128)  # one input for both runs: a wrong candidate's error is the same in each


def _tune(workers, candidates, times, **op_options):
    op = make_op(uname(), candidates=candidates, default=candidates[0], **op_options)
    timer = StubTimer(times)
    # the call itself, not captured by running it (a default that fails to compile would raise)
    result = tune_calls([Call(op, (X,), {}, "tunable")], timer=timer, settings=FAST, workers=workers)
    (outcome,) = result.outcomes
    assert timer.overlapped == [0] * len(timer.overlapped)
    return outcome, timer


def _rows(outcome):
    """The report's rows without the columns that are wall times (the first call's)."""
    keep = []
    for c in outcome.candidates:  # (each run tunes an op of its own name, which reasons quote)
        keep.append(
            (c.config, c.status, c.reason.replace(outcome.op, "OP"), c.error_ratio, c.reduction, c.timing)
        )
    return keep


def _same(serial, parallel):
    assert _rows(serial) == _rows(parallel)
    assert serial.chosen == parallel.chosen and serial.choice == parallel.choice
    assert serial.notes == parallel.notes
    assert serial.failure().replace(serial.op, "OP") == parallel.failure().replace(parallel.op, "OP")
    assert serial.method["passes"] == parallel.method["passes"]

    # the rows of the printed report, time columns (median .. first call) aside
    def strip(o):
        return [
            r.replace(o.op, "OP").split()[:2] + r.replace(o.op, "OP").split()[-1:] for r in _candidate_rows(o)
        ]

    assert strip(serial) == strip(parallel)


@SETTINGS
@given(
    st.lists(st.sampled_from(BLOCKS), min_size=2, max_size=5, unique=True),
    st.lists(st.floats(1e-4, 1e-2), min_size=len(BLOCKS), max_size=len(BLOCKS)),
    st.integers(2, 4),
    st.sampled_from([None, "wrong", "fails"]),
)
def test_a_parallel_build_chooses_and_reports_as_the_serial_one(candidates, times, workers, bad):
    """Any candidate set, timings, worker count, and a wrong or an uncompilable candidate:
    the same choice, rows (order, status, reason, error ratio, timings) and failure record."""
    base = dict(zip(BLOCKS, times))
    options = {"wrong": {"wrong": candidates[-1]}, "fails": {"fails": (candidates[-1],)}, None: {}}[bad]
    serial, _ = _tune(1, tuple(candidates), base, **options)
    parallel, _ = _tune(workers, tuple(candidates), base, **options)
    _same(serial, parallel)
    assert "build_s" not in serial.method and serial.method["build_workers"] == 1
    assert parallel.method["build_workers"] == min(workers, len(candidates))
    built = [c for c in parallel.candidates if c.build_s is not None]
    assert "build_s" in parallel.method and len(built) == len(candidates)
    assert all(c.first_call_s >= c.build_s for c in built)  # the first call counts its build


def test_a_candidate_that_fails_to_compile_is_reported_as_in_a_serial_run():
    serial, s_timer = _tune(1, (8, 64, 256), {8: 3e-3, 64: 2e-3, 256: 1e-3}, fails=(256,))
    parallel, p_timer = _tune(3, (8, 64, 256), {8: 3e-3, 64: 2e-3, 256: 1e-3}, fails=(256,))
    _same(serial, parallel)
    failed = {c.config[0]: c for c in parallel.candidates}[256]
    assert failed.status == "failed" and "tpu_kernels_test_unlowerable" in failed.reason
    assert "block_rows=256" not in p_timer.asked and s_timer.asked == p_timer.asked
    assert parallel.chosen == serial.chosen == {"block_rows": 64}


def test_when_every_candidate_fails_to_compile_the_failed_entry_is_the_serial_ones():
    serial, _ = _tune(1, (8, 64), {8: 1e-3, 64: 1e-3}, fails=(8, 64))
    parallel, _ = _tune(2, (8, 64), {8: 1e-3, 64: 1e-3}, fails=(8, 64))
    _same(serial, parallel)
    assert serial.choice is None and serial.entry().source == "failed"
    why = [o.entry().evidence["why"].replace(o.op, "OP") for o in (serial, parallel)]
    assert why[0] == why[1] and "tpu_kernels_test_unlowerable" in why[0]


def test_the_candidates_are_traced_in_the_pool_and_not_again_at_their_first_call():
    traced_in: list[str] = []
    op = make_op(uname(), candidates=(8, 16, 32, 64), default=8)
    kernel = op.source.jax_body

    def body(x, *, block_rows):
        traced_in.append(threading.current_thread().name)
        return kernel(x, block_rows=block_rows)

    # the op's body is bound into its executors: watch it there
    for executor in op.source._executors.values():
        executor.fn = body
    autotune(op, X, timer=StubTimer(dict.fromkeys(BLOCKS, 1e-3)), settings=FAST, workers=3, save=False)
    # capture's own call builds the default in this thread; the other three in the pool, once each
    pooled = [n for n in traced_in if n.startswith("tpu-kernels-tune")]
    assert len(pooled) == 3 and len(traced_in) == 4


@pytest.mark.parametrize(
    ("given_", "env", "n", "expected"),
    [
        (None, None, 3, 1),
        (1, "4", 8, 1),
        (None, "2", 8, 2),
        (16, None, 5, 5),
        (None, "9", 1, 1),
    ],
)
def test_the_workers_are_the_argument_else_the_environment_else_the_cpus(
    monkeypatch, given_, env, n, expected
):
    if env is None:
        monkeypatch.delenv(point.WORKERS_ENV, raising=False)
    else:
        monkeypatch.setenv(point.WORKERS_ENV, env)
    assert point.build_workers(n, given_) == expected


@pytest.mark.parametrize(
    ("given_", "env"), [(0, None), (None, "0"), (None, "many"), (-2, None), (True, None)]
)
def test_a_worker_count_that_is_not_a_positive_whole_number_is_refused(monkeypatch, given_, env):
    if env is None:
        monkeypatch.delenv(point.WORKERS_ENV, raising=False)
    else:
        monkeypatch.setenv(point.WORKERS_ENV, env)
    with pytest.raises(ValueError, match="1 or more"):
        point.build_workers(4, given_)


def test_a_build_ahead_compiles_the_kernel_and_does_not_run_it():
    """Inside `prebuild.build` the executor compiles the call's kernel and raises `Built` in place
    of running it, on the dispatcher's path and on the eager shortcut's (an entry already built)."""
    op = make_op(uname(), candidates=(8, 16), default=8)
    executor = op.source._executors["cpu"]
    assert prebuild.build(lambda: op(X, block_rows=16))  # built, not run
    assert executor.cache.info().misses == 1 and not prebuild.active()
    op(X, block_rows=16)  # runs, from the entry built
    assert executor.cache.info().misses == 1
    assert prebuild.build(lambda: op(X, block_rows=16))  # the shortcut's hit: not run either
