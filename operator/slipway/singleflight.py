"""One read at a time per key, its answer shared: the cache of the operator's on-demand reads of
Kueue (queue positions, queue quotas).

The first pass that needs a key's answer reads it, in its own thread; passes that need it while it is
read wait for that answer (at most their ``timeout``), never read it twice. An answer is kept ``ttl``
seconds after it came, a failure (the read returned None, or raised) ``failed_ttl`` seconds, on a
monotonic clock. When a key is read, the answers of other keys that expired are dropped: no pass
asks for them any more, so the cache holds only what is in use.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


@dataclass
class _Read(Generic[V]):
    answer: Future[V | None] = field(default_factory=Future)
    finished: float | None = None  # when the answer came (clock); None while it is read


class SingleFlight(Generic[K, V]):
    def __init__(self, ttl: float, failed_ttl: float, on_drop: Callable[[K], None] | None = None) -> None:
        self.ttl, self.failed_ttl, self.on_drop = ttl, failed_ttl, on_drop
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
        if mine:
            try:
                known.answer.set_result(read())
            except BaseException as exc:  # kept as the answer: every caller sees it
                known.answer.set_exception(exc)
            finally:
                known.finished = clock()  # after the answer: a finished read always has one
        return known.answer.result(timeout=timeout)

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
