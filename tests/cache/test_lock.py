"""The in-process cache's per-key build lock (`CompileCache.get_or_build`) under threads: one
key is built once however many threads ask, different keys build at the same time, and a
failed build raises in every thread that waited for it and leaves nothing behind."""

import sys
import threading
import time

import pytest

from tpu_kernels.runtime.cache import CompileCache

from ..helpers import hypothesis_settings

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

SETTINGS = hypothesis_settings(25, 60)
WAIT_S = 30  # a bound on waits that only a deadlock reaches (never a timed assertion)


def _run_threads(targets):
    threads = [threading.Thread(target=t) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S)
    assert not any(t.is_alive() for t in threads), "a thread is stuck: the build lock deadlocked"


@SETTINGS
@given(st.lists(st.integers(0, 3), min_size=1, max_size=12))
def test_each_key_is_built_once_however_many_threads_ask(keys):
    """Every thread asks for its key at once (a barrier); each distinct key is built once, and
    every thread gets the value its key's one build made."""
    cache = CompileCache()
    builds: dict[int, int] = {}
    count_lock = threading.Lock()
    barrier = threading.Barrier(len(keys))
    got: list = [None] * len(keys)

    def build(key):
        with count_lock:
            builds[key] = builds.get(key, 0) + 1
        return object()  # a new value per build: a second build would show as another object

    def ask(i):
        def go():
            barrier.wait(WAIT_S)
            got[i] = (keys[i], cache.get_or_build(keys[i], lambda: build(keys[i])))

        return go

    _run_threads([ask(i) for i in range(len(keys))])
    assert builds == {k: 1 for k in set(keys)}
    values = {}
    for key, value in got:
        assert values.setdefault(key, value) is value
    info = cache.info()
    assert (info.misses, info.hits, info.size) == (len(set(keys)), len(keys) - len(set(keys)), len(set(keys)))


def test_different_keys_build_at_the_same_time():
    """Two builds of different keys overlap: each waits inside its build until the other has
    started (with one build at a time the second would never start and the waits time out)."""
    cache = CompileCache()
    started = {k: threading.Event() for k in ("a", "b")}
    overlapped = {}

    def build(key, other):
        started[key].set()
        overlapped[key] = started[other].wait(WAIT_S)
        return key

    _run_threads(
        [
            lambda: cache.get_or_build("a", lambda: build("a", "b")),
            lambda: cache.get_or_build("b", lambda: build("b", "a")),
        ]
    )
    assert overlapped == {"a": True, "b": True}
    assert sorted(cache.keys()) == ["a", "b"]


def _waiting_on_a_build(thread: threading.Thread) -> bool:
    """Whether `thread` is blocked in `get_or_build`, waiting for another thread's build."""
    frame = sys._current_frames().get(thread.ident)
    names = []
    while frame is not None:
        names.append(frame.f_code.co_name)
        frame = frame.f_back
    return "wait" in names and "get_or_build" in names


@SETTINGS
@given(st.integers(1, 6))
def test_a_failed_build_raises_in_every_waiter_and_a_later_call_builds_again(waiters):
    """The owner's build fails while `waiters` threads wait for it: each raises that very
    exception (none builds the key itself), and the key is left unbuilt for a later call."""
    cache = CompileCache()
    building, release = threading.Event(), threading.Event()
    builds, errors = [], []
    errors_lock = threading.Lock()

    def failing():
        builds.append(threading.get_ident())
        building.set()
        release.wait(WAIT_S)
        raise RuntimeError("the compiler said no")

    def ask():
        try:
            cache.get_or_build("k", failing)
        except RuntimeError as e:
            with errors_lock:
                errors.append(e)

    owner = threading.Thread(target=ask)
    owner.start()
    assert building.wait(WAIT_S)
    others = [threading.Thread(target=ask) for _ in range(waiters)]
    for t in others:
        t.start()
    for _ in range(int(WAIT_S / 0.001)):  # until every waiter is blocked on the owner's build
        if all(_waiting_on_a_build(t) for t in others):
            break
        time.sleep(0.001)
    release.set()
    for t in [owner, *others]:
        t.join(WAIT_S)
    assert not any(t.is_alive() for t in [owner, *others])
    assert builds == [owner.ident]  # built once, by the owner
    assert len(errors) == waiters + 1 and all(e is errors[0] for e in errors)
    assert cache.keys() == [] and cache.info().misses == 0  # nothing poisoned
    assert cache.get_or_build("k", lambda: "built") == "built"  # a later call builds again
    assert cache.get_or_build("k", lambda: "again") == "built"


def test_a_build_that_asks_for_its_own_key_does_not_deadlock():
    cache = CompileCache()
    calls = []

    def build():
        calls.append(1)
        if len(calls) == 1:
            return cache.get_or_build("k", build) + 1
        return 1

    assert cache.get_or_build("k", build) == 2
