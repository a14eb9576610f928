"""One read at a time per key, its answer shared: the cache of the operator's on-demand reads of
Kueue (queue positions, queue quotas) and of OpenCost's node prices.

The first pass that needs a key's answer reads it, in its own thread; passes that need it while it is
read wait for that answer (at most their ``timeout``), never read it twice. With ``read_in_thread``
the read runs in a thread of its own instead, so that no pass, the first included, waits longer than
its ``timeout``; once a pass gave up on a read, the others do not wait for it again (a
``TimeoutError`` at once) until it answers. An answer is kept ``ttl`` seconds after it came, a
failure (the read returned None, or raised) ``failed_ttl`` seconds, on a monotonic clock. When a
key is read, the answers of other keys that expired are dropped: no pass asks for them any more, so
the cache holds only what is in use.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


@dataclass
class _Read(Generic[V]):
    answer: Future[V | None] = field(default_factory=Future)
    finished: float | None = None  # when the answer came (clock); None while it is read
    overdue: bool = False  # a pass gave up waiting for it (read_in_thread: the others do not wait)


class SingleFlight(Generic[K, V]):
    def __init__(
        self,
        ttl: float,
        failed_ttl: float,
        on_drop: Callable[[K], None] | None = None,
        *,
        read_in_thread: bool = False,
    ) -> None:
        self.ttl, self.failed_ttl, self.on_drop = ttl, failed_ttl, on_drop
        self.read_in_thread = read_in_thread
        self._reads: dict[K, _Read[V]] = {}
        self._lock = threading.Lock()

    def get(
        self,
        key: K,
        read: Callable[[], V | None],
        timeout: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> V | None:
        """``key``'s answer: kept, being read (waited for, at most ``timeout`` seconds: then
        concurrent.futures.TimeoutError), or read now by ``read``. A read that raised raises again
        for every caller until it expires."""
        with self._lock:
            now = clock()
            known = self._reads.get(key)
            mine = known is None or self._expired(known, now)
            if mine:
                self._drop_expired(now, key)
                known = self._reads[key] = _Read()
        assert known is not None
        if mine and self.read_in_thread:
            threading.Thread(target=self._read, args=(known, read, clock), name="singleflight", daemon=True).start()
        elif mine:
            self._read(known, read, clock)
        try:
            return known.answer.result(timeout=0 if known.overdue else timeout)
        except FutureTimeout:
            known.overdue = self.read_in_thread
            raise

    def _read(self, known: _Read[V], read: Callable[[], V | None], clock: Callable[[], float]) -> None:
        try:
            value, error = read(), None
        except BaseException as exc:  # kept as the answer: every caller sees it
            value, error = None, exc
        with self._lock:  # the answer and its time together: a finished read always has an answer
            known.finished = clock()
            if error is None:
                known.answer.set_result(value)
            else:
                known.answer.set_exception(error)

    def _expired(self, known: _Read[V], now: float) -> bool:
        if known.finished is None:
            return False
        failed = known.answer.exception() is not None or known.answer.result() is None
        return now - known.finished >= (self.failed_ttl if failed else self.ttl)

    def _drop_expired(self, now: float, reading: K) -> None:
        """Other keys' expired answers (``reading``'s own is replaced, not dropped)."""
        for key in [k for k, r in self._reads.items() if k != reading and self._expired(r, now)]:
            del self._reads[key]
            if self.on_drop is not None:
                self.on_drop(key)

    def clear(self) -> None:
        with self._lock:
            self._reads.clear()

    def __len__(self) -> int:
        return len(self._reads)

    def __iter__(self) -> Iterator[K]:
        with self._lock:
            return iter(list(self._reads))
