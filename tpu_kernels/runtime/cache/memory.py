"""The in-process tier: compiled callables, one per key, bounded, thread-safe."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

V = TypeVar("V")


@dataclass(frozen=True)
class CacheInfo:
    hits: int
    misses: int
    evictions: int
    size: int
    maxsize: int


class _Pending:
    """One key being built: its builder's thread, and what the waiters get once it is done."""

    __slots__ = ("done", "error", "thread", "value")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.thread = threading.get_ident()
        self.value: Any = None
        self.error: BaseException | None = None


class CompileCache(Generic[V]):
    """An LRU map from a hashable key to a value that is costly to build.

    `get_or_build` builds each missing key once, even when several threads ask
    for it at the same moment (the others wait for that build and get its value,
    or its exception; a failed build leaves nothing behind, so a later call
    builds again); different keys build concurrently (the tuner builds its
    candidates in a thread pool). A hit costs one lock round and a dict lookup.
    """

    def __init__(self, maxsize: int = 256) -> None:
        if maxsize < 1:
            raise ValueError(f"cache maxsize must be >= 1, got {maxsize}")
        self.maxsize = maxsize
        self._entries: OrderedDict[Any, V] = OrderedDict()
        self._lock = threading.Lock()
        self._building: dict[Any, _Pending] = {}  # the per-key build locks, under _lock
        self._hits = 0
        self._misses = 0
        self._evictions = 0
        # counts every removal (eviction, discard, clear): a holder of a value found here
        # (eager.py's memo of an op's last call) uses it while the generation is unchanged
        self.generation = 0

    def get_or_build(self, key: Any, build: Callable[[], V]) -> V:
        with self._lock:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
                self._hits += 1
                return value
            pending = self._building.get(key)
            if pending is None:
                pending = self._building[key] = _Pending()
                owner = True
            else:
                # A build that asks for its own key again (the old reentrant lock's case)
                # builds it again rather than wait for itself.
                owner = False
                if pending.thread == threading.get_ident():
                    return build()
        if not owner:
            pending.done.wait()
            if pending.error is not None:
                raise pending.error
            with self._lock:
                self._hits += 1
            return pending.value
        try:
            value = build()
        except BaseException as e:
            with self._lock:
                del self._building[key]
            pending.error = e
            pending.done.set()
            raise
        with self._lock:
            self._misses += 1
            self._entries[key] = value
            while len(self._entries) > self.maxsize:
                self._entries.popitem(last=False)
                self._evictions += 1
                self.generation += 1
            del self._building[key]
        pending.value = value
        pending.done.set()
        return value

    def peek(self, key: Any) -> V | None:
        """The value for `key` if built, else None; lock-free, for the eager hot path.

        A hit is counted and refreshes the key's place in the LRU order. Under the
        GIL each dict operation is atomic; a key evicted by another thread between
        the two steps is simply a miss here.
        """
        value = self._entries.get(key)
        if value is not None:
            try:
                self._entries.move_to_end(key)
            except KeyError:
                return None
            self._hits += 1  # not under the lock: counts from racing threads may be lost
        return value

    def hit(self) -> None:
        """Count a hit found without `peek` (eager.py's memo of the last call's entry)."""
        self._hits += 1  # not under the lock, as in peek

    def discard(self, key: Any, value: V) -> None:
        """Forget `key` if it still maps to `value` (an entry found bad at run time; a
        thread that already rebuilt it keeps its new value)."""
        with self._lock:
            if self._entries.get(key) is value:
                del self._entries[key]
                self.generation += 1

    def info(self) -> CacheInfo:
        with self._lock:
            return CacheInfo(self._hits, self._misses, self._evictions, len(self._entries), self.maxsize)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._hits = self._misses = self._evictions = 0
            self.generation += 1

    def keys(self) -> list[Any]:
        with self._lock:
            return list(self._entries)
