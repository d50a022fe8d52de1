"""Calls from many threads under every interpreter mode: each result is the one a single
thread gets, and no call fails.

JAX's TPU-semantics interpreter keeps its state in module globals; before tpu_kernels
serialized calls under it, two threads calling softmax 60 times each got each other's
outputs 9-12 times, NaNs and `KeyError: ('vmem', ...)` from JAX's shared memory.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import jax
import pytest
import torch

import tpu_kernels
from tpu_kernels.kernels import rmsnorm, softmax

# Small shapes: the TPU interpreter takes about 10 ms per call at 8x128 here.
ROWS, COLS = 8, 128


def _run_threads(n: int, work: Callable[[int], None], timeout: float = 120.0) -> None:
    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
        assert not t.is_alive(), "a thread hung (deadlock?)"


@pytest.mark.parametrize("mode", ["tpu", "tpu-races"])
def test_calls_from_four_threads_in_the_tpu_interpreter_are_each_threads_own(mode):
    calls = 50 if mode == "tpu" else 10  # the race detector is ~3x slower per call
    xs = [torch.randn(ROWS, COLS) for _ in range(4)]
    w = torch.randn(COLS)
    with tpu_kernels.interpret_mode(mode):
        expected = [(softmax(x), rmsnorm(x, w)) for x in xs]
    wrong: list[int] = []
    errors: list[BaseException] = []

    def work(i: int) -> None:
        with tpu_kernels.interpret_mode(mode):
            for n in range(calls):  # softmax and rmsnorm in turn
                try:
                    y = softmax(xs[i]) if n % 2 else rmsnorm(xs[i], w)
                except BaseException as e:  # noqa: BLE001 - every failure is reported below
                    errors.append(e)
                    continue
                if not torch.equal(y, expected[i][n % 2 == 0]):
                    wrong.append(i)

    _run_threads(4, work)
    assert not errors, f"{len(errors)} calls raised, first: {errors[0]!r}"
    assert not wrong, f"{len(wrong)} of {4 * calls} calls got another result"


def test_a_call_uses_one_mode_while_another_thread_flips_the_process_wide_mode():
    """4 threads follow the process-wide mode while a fifth flips it every 3 ms; both
    interpreters give bit-identical results for these kernels, so every call must
    match (before: 58 wrong results and 1,564 exceptions in 71,920 calls).

    Each thread makes a fixed number of calls and waits for a flip before each next one, so
    every thread's calls straddle mode changes however slow the machine is (a count of calls
    in a fixed time, asserted before, measured the machine's load: 18 calls at load 10)."""
    xs = [torch.randn(ROWS, COLS) for _ in range(4)]
    w = torch.randn(COLS)
    expected = {}
    for mode in ("fast", "tpu"):
        with tpu_kernels.interpret_mode(mode):
            expected[mode] = [(softmax(x), rmsnorm(x, w)) for x in xs]
    for a, b in zip(expected["fast"], expected["tpu"]):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])  # the premise of this test
    calls = 15
    stop = threading.Event()
    wrong: list[int] = []
    errors: list[BaseException] = []
    counts = [0] * 4
    flips = [0]

    def flip() -> None:
        while not stop.is_set():
            tpu_kernels.set_interpret_mode(("fast", "tpu")[flips[0] % 2])
            flips[0] += 1
            time.sleep(0.003)

    def work(i: int) -> None:
        for _ in range(calls):
            seen = flips[0]
            try:
                y, r = softmax(xs[i]), rmsnorm(xs[i], w)
            except BaseException as e:  # noqa: BLE001
                errors.append(e)
            else:
                counts[i] += 1
                if not (torch.equal(y, expected["fast"][i][0]) and torch.equal(r, expected["fast"][i][1])):
                    wrong.append(i)
            while flips[0] == seen and not stop.is_set():  # the mode changes before the next call
                time.sleep(0.001)

    flipper = threading.Thread(target=flip, daemon=True)
    workers = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(4)]
    try:
        flipper.start()
        for t in workers:
            t.start()
        for t in workers:
            t.join(120)
    finally:
        stop.set()
        flipper.join(60)
        tpu_kernels.set_interpret_mode("fast")
    assert not any(t.is_alive() for t in [flipper, *workers]), "a thread hung (deadlock?)"
    assert flips[0] >= calls  # each thread waited for a flip after each call
    assert not errors, f"{len(errors)} calls raised, first: {errors[0]!r}"
    assert not wrong, f"{len(wrong)} of {sum(counts)} calls got a wrong result"
    assert counts == [calls] * 4


@tpu_kernels.tpu_kernel("test_threads::maybe_fails")
def _maybe_fails(x: jax.Array, *, fail: bool = False) -> jax.Array:
    from tpu_kernels.kernels.softmax.pallas import softmax as pallas_softmax

    if fail:
        raise ValueError("deliberate failure while tracing")
    return pallas_softmax(x)


def test_a_failing_call_does_not_reset_the_interpreter_under_another_call():
    """A failed call resets JAX's TPU-interpreter state (it cannot run again otherwise);
    the reset waits for the calls that are using that state."""
    xs = [torch.randn(ROWS, COLS) for _ in range(3)]
    with tpu_kernels.interpret_mode("tpu"):
        expected = [_maybe_fails(x) for x in xs]
    wrong: list[int] = []
    errors: list[BaseException] = []
    failures = [0]

    def work(i: int) -> None:
        with tpu_kernels.interpret_mode("tpu"):
            for _ in range(30):
                if i == 3:  # fails in every call, and resets the interpreter each time
                    with pytest.raises(tpu_kernels.KernelError, match="deliberate"):
                        _maybe_fails(xs[0], fail=True)
                    failures[0] += 1
                    continue
                try:
                    y = _maybe_fails(xs[i])
                except BaseException as e:  # noqa: BLE001
                    errors.append(e)
                    continue
                if not torch.equal(y, expected[i]):
                    wrong.append(i)

    _run_threads(4, work)
    assert failures[0] == 30
    assert not errors, f"{len(errors)} calls raised, first: {errors[0]!r}"
    assert not wrong
