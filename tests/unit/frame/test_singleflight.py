"""SingleFlight: one read at a time per key, its answer shared and kept ttl seconds, a failure
failed_ttl seconds; expired keys dropped when another is read; with read_in_thread, no caller waits
past its timeout, nor for a read another gave up on."""

from __future__ import annotations

import threading
import time
from concurrent.futures import TimeoutError as FutureTimeout

import pytest

from localkube.wait import wait_for
from slipway.singleflight import SingleFlight


class Reader:
    """Counts reads; a read may be held until released, and answers what it is told."""

    def __init__(self, answer: object = "a") -> None:
        self.answer, self.calls = answer, 0
        self.started, self.release = threading.Event(), threading.Event()
        self.release.set()

    def __call__(self) -> object:
        self.calls += 1
        self.started.set()
        assert self.release.wait(10)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def test_an_answer_is_kept_ttl_seconds_and_a_failure_failed_ttl():
    cache: SingleFlight[str, object] = SingleFlight(ttl=10, failed_ttl=60)
    now, good, bad = [0.0], Reader("a"), Reader(None)
    clock = lambda: now[0]  # noqa: E731
    assert cache.get("k", good, clock=clock) == "a" and cache.get("f", bad, clock=clock) is None
    now[0] = 9.9
    assert (cache.get("k", good, clock=clock), cache.get("f", bad, clock=clock)) == ("a", None)
    assert (good.calls, bad.calls) == (1, 1)
    now[0] = 10.0
    cache.get("k", good, clock=clock)
    cache.get("f", bad, clock=clock)
    assert (good.calls, bad.calls) == (2, 1)  # the failure is kept longer
    now[0] = 60.0
    cache.get("f", bad, clock=clock)
    assert bad.calls == 2


def test_a_read_that_raises_raises_for_every_caller_until_it_expires():
    cache: SingleFlight[str, object] = SingleFlight(ttl=10, failed_ttl=30)
    now, broken = [0.0], Reader(LookupError("no"))
    for at in (0.0, 29.0):
        now[0] = at
        with pytest.raises(LookupError, match="no"):
            cache.get("k", broken, clock=lambda: now[0])
    assert broken.calls == 1


def test_callers_during_a_read_wait_for_it_and_never_read_twice():
    cache: SingleFlight[str, object] = SingleFlight(ttl=10, failed_ttl=10)
    slow = Reader("answer")
    slow.release.clear()
    found: list[object] = []
    first = threading.Thread(target=lambda: found.append(cache.get("k", slow)))
    first.start()
    assert slow.started.wait(5)
    waiters = [threading.Thread(target=lambda: found.append(cache.get("k", slow, timeout=10))) for _ in range(3)]
    for thread in waiters:
        thread.start()
    with pytest.raises(FutureTimeout):  # a caller that will not wait long gets no answer
        cache.get("k", slow, timeout=0.05)
    slow.release.set()
    for thread in [first, *waiters]:
        thread.join(10)
    assert found == ["answer"] * 4 and slow.calls == 1


def test_keys_no_one_asks_for_are_dropped_when_another_is_read():
    dropped: list[str] = []
    cache: SingleFlight[str, object] = SingleFlight(ttl=10, failed_ttl=60, on_drop=dropped.append)
    now = [0.0]
    for key in ("a", "b", "failed"):
        cache.get(key, Reader(None if key == "failed" else key), clock=lambda: now[0])
    assert set(cache) == {"a", "b", "failed"} and len(cache) == 3
    now[0] = 10.0
    cache.get("a", Reader("a"), clock=lambda: now[0])  # "a" read again, "b" expired, "failed" kept
    assert set(cache) == {"a", "failed"} and dropped == ["b"]
    cache.clear()
    assert len(cache) == 0


def test_a_read_in_its_own_thread_holds_no_caller_past_its_timeout_and_is_not_waited_for_twice():
    cache: SingleFlight[str, object] = SingleFlight(ttl=10, failed_ttl=10, read_in_thread=True)
    slow = Reader("late")
    slow.release.clear()
    with pytest.raises(FutureTimeout):  # the first caller too waits no longer than its timeout
        cache.get("k", slow, timeout=0.05)
    assert slow.started.wait(5)
    started = time.monotonic()
    with pytest.raises(FutureTimeout):  # a read someone gave up on is not waited for again
        cache.get("k", slow, timeout=5)
    assert time.monotonic() - started < 1.0
    slow.release.set()
    assert wait_for(lambda: cache.get("k", slow, timeout=0), 5, "the late answer") == "late" and slow.calls == 1


def test_without_its_own_thread_a_waiter_that_gave_up_does_not_stop_the_next_from_waiting():
    cache: SingleFlight[str, object] = SingleFlight(ttl=10, failed_ttl=10)
    slow = Reader("answer")
    slow.release.clear()
    first = threading.Thread(target=lambda: cache.get("k", slow))
    first.start()
    assert slow.started.wait(5)
    with pytest.raises(FutureTimeout):
        cache.get("k", slow, timeout=0.05)
    threading.Timer(0.1, slow.release.set).start()
    assert cache.get("k", slow, timeout=10) == "answer" and slow.calls == 1
    first.join(10)
