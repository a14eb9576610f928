"""The event-driven frame: watches feed caches, changes wake the objects they concern, and
a scheduler runs one reconciliation pass per object at a time.

kopf watches the three kinds and every child Slipway makes (selected by label);
``@kopf.index`` keeps each in memory, so a pass reads from the cache and not
from the API server. A child's event wakes its owner; a TrainingRun wakes the
ModelArtifacts that reference it, a ModelArtifact its TrainingRun and the
InferenceDeployments that serve it. A parent's own status writes do not wake it.
Timers exist only where time is the input: a pass returns when it wants to run
again (an active canary's interval, a training run's progress, the MLflow alias
poll), and nothing else runs at rest.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import logging
import math
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf

log = logging.getLogger(__name__)

Key = tuple[str, str, str]  # (plural, namespace, name) of a Slipway object
PassFn = Callable[[Key], "float | None"]

READ_ATTEMPTS = 10  # copies of an index store tried while kopf changes it on the event loop
# Backoff for passes that fail with an unexpected error (seconds), by consecutive failures.
ERROR_DELAYS = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)


CRITICAL, NEW, URGENT, TIMED = "critical", "new", "urgent", "timed"
AGEING_SECONDS = 30.0  # a timed pass that has waited this long goes before passes a change woke
# The oldest waiter of a kind none of whose first passes runs, once it has waited this long, goes
# before quicker kinds' first passes.
NEW_AGEING_SECONDS = 10.0
FIRST_PASS_WEIGHT = 0.2  # weight of the latest first pass in its kind's moving average of durations


@dataclass(eq=False)  # a waiter is itself: removed from its lane by identity
class Waiter:
    key: Key
    lane: str
    since: float
    future: asyncio.Future[None]


class Slots:
    """``size`` passes at once, in four lanes:

    - *critical*: passes of an InferenceDeployment in an active rollout (its analysis, its rollback).
      One slot (``reserved``) is theirs alone: however many other passes are slow (a blackholed MLflow
      answers each call only at its 10 s timeout) or waiting, a canary's decision is never held back.
    - *new*: the first pass of an object (in this process): it makes the first children, so a sweep
      of a thousand TrainingRuns gets its Jobs while the pods of the first ones change. ``for_new``
      slots are theirs alone: a first pass never waits behind passes that wait on MLflow. While
      several kinds wait, a freed slot goes to the kind whose first passes have been quickest (a
      moving average of the durations of those that ran while others waited, as in a sweep, and
      ended without an error), except that a kind none of whose first passes runs gets it once
      its oldest waiter has waited ``new_ageing`` seconds. A kind not yet measured counts as
      quickest while none of its first passes runs, as slowest while one does. So while a sweep's
      TrainingRuns wait, InferenceDeployments' first passes, which wait on MLflow and once measured
      are slower, get a slot one at a time, and only once their oldest has waited 10 s; slots they
      took while nothing else waited are theirs until their passes end.
    - *urgent*: passes a change woke (a spec change, a child's event).
    - *timed*: passes only their own timer asked for (training progress, the alias poll, a retry).

    A freed slot goes to the oldest critical waiter, then to a new one, then to a timed one that has
    waited ``ageing`` seconds (so a stream of changes never starves a poll for ever), then to the
    oldest urgent one, then to the oldest timed one."""

    def __init__(
        self,
        size: int,
        reserved: int = 1,
        ageing: float = AGEING_SECONDS,
        for_new: int = 0,
        new_ageing: float = NEW_AGEING_SECONDS,
    ) -> None:
        self.size = size
        self.reserved = max(0, min(reserved, size - 1))
        self.for_new = max(0, min(for_new, size - self.reserved - 1))
        self.ageing = ageing
        self.new_ageing = new_ageing
        self.busy = {CRITICAL: 0, NEW: 0, URGENT: 0, TIMED: 0}
        self.lanes: dict[str, deque[Waiter]] = {CRITICAL: deque(), NEW: deque(), URGENT: deque(), TIMED: deque()}
        self.waiting: dict[Key, Waiter] = {}  # keys waiting in the timed lane
        self.first_pass_seconds: dict[str, float] = {}  # moving average of first passes' durations, by plural
        self.new_by_kind: dict[str, int] = {}  # first passes running, by plural
        self.contended: set[Key] = set()  # first passes running that got their slot while others waited

    @property
    def urgent(self) -> deque[Waiter]:
        return self.lanes[URGENT]

    @property
    def timed(self) -> deque[Waiter]:
        return self.lanes[TIMED]

    @property
    def free(self) -> int:
        return self.size - sum(self.busy.values())

    def _fits(self, lane: str) -> bool:
        """A slot is free for ``lane`` (the reserved ones only for critical passes, those kept for new
        objects only for them)."""
        if lane == CRITICAL:
            return self.free > 0
        others = self.busy[URGENT] + self.busy[TIMED]
        if lane == NEW:
            return self.free > 0 and self.busy[NEW] + others < self.size - self.reserved
        return self._fits(NEW) and others < self.size - self.reserved - self.for_new

    def _next(self, now: float) -> Waiter | None:
        """Who gets a free slot now, by the lanes' order."""
        if self.lanes[CRITICAL] and self._fits(CRITICAL):
            return self.lanes[CRITICAL][0]
        if self.lanes[NEW] and self._fits(NEW):
            return self._first_of_new(now)
        if not self._fits(URGENT):
            return None
        timed = self.lanes[TIMED]
        if timed and now - timed[0].since >= self.ageing:
            return timed[0]
        return (self.lanes[URGENT] or timed or [None])[0]

    def _first_of_new(self, now: float) -> Waiter:
        """The oldest waiter of a kind none of whose first passes runs, if it has waited
        ``new_ageing`` seconds; else the oldest of the kind whose first passes have been quickest
        (a kind not measured yet first while none of its first passes runs, last while one does;
        then the oldest)."""
        first: dict[str, Waiter] = {}  # the oldest waiter of each kind, oldest first
        for waiter in self.lanes[NEW]:
            first.setdefault(waiter.key[0], waiter)
        for kind, waiter in first.items():
            if now - waiter.since >= self.new_ageing and not self.new_by_kind.get(kind):
                return waiter
        return min(first.values(), key=lambda w: (self._cost(w.key[0]), w.since))

    def _cost(self, kind: str) -> float:
        """How long ``kind``'s first passes take: unknown is 0 for the first one, then infinite (one
        unmeasured pass at a time, so a new kind does not fill the slots before its first ends)."""
        measured = self.first_pass_seconds.get(kind)
        if measured is not None:
            return measured
        return math.inf if self.new_by_kind.get(kind) else 0.0

    async def acquire(self, key: Key, lane: str) -> str:
        """Wait for a slot; returns the lane it was granted in (a timed waiter a change promoted is
        urgent by then): the lane to ``release``."""
        loop = asyncio.get_running_loop()
        waiter = Waiter(key, lane, loop.time(), loop.create_future())
        self.lanes[lane].append(waiter)
        if lane == TIMED:
            self.waiting[key] = waiter
        self._dispatch()
        try:
            await waiter.future
            return waiter.lane
        except asyncio.CancelledError:
            if waiter.future.done() and not waiter.future.cancelled():
                self.release(waiter.lane, key)  # the slot was handed over as the task was cancelled: pass it on
            else:
                with contextlib.suppress(ValueError):
                    self.lanes[waiter.lane].remove(waiter)
            raise
        finally:
            if self.waiting.get(key) is waiter:
                del self.waiting[key]

    def lane_of(self, key: Key) -> str | None:
        """The lane ``key`` waits in, None if it does not wait."""
        return next((lane for lane, waiters in self.lanes.items() if any(w.key == key for w in waiters)), None)

    def promote(self, key: Key) -> None:
        """A change woke ``key`` while its timed pass waits for a slot: it waits as urgent now."""
        waiter = self.waiting.pop(key, None)
        if waiter is not None and not waiter.future.done():
            with contextlib.suppress(ValueError):
                self.lanes[TIMED].remove(waiter)
                waiter.lane = URGENT
                self.lanes[URGENT].append(waiter)

    def release(self, lane: str, key: Key | None = None, seconds: float | None = None) -> None:
        """The pass of ``key`` granted in ``lane`` is done; a first pass's duration, ``seconds`` (None
        for a pass that failed or did not run), goes into its kind's moving average if others
        waited when it got its slot. A first pass's ``key`` is needed: its kind is counted."""
        if lane == NEW and key is None:
            raise ValueError("a first pass is released with its key")
        self.busy[lane] -= 1
        if lane == NEW:
            assert key is not None
            self.new_by_kind[key[0]] -= 1
            contended = key in self.contended
            self.contended.discard(key)
            average = self.first_pass_seconds.get(key[0])
            if contended and seconds is not None:
                self.first_pass_seconds[key[0]] = (
                    seconds if average is None else average + FIRST_PASS_WEIGHT * (seconds - average)
                )
        self._dispatch()

    def _dispatch(self) -> None:
        now = asyncio.get_running_loop().time()
        while (waiter := self._next(now)) is not None:
            self.lanes[waiter.lane].remove(waiter)  # the first (or the first of its kind) of its lane
            if waiter.future.done():
                continue  # cancelled while it waited
            self.busy[waiter.lane] += 1
            if waiter.lane == NEW:
                self.new_by_kind[waiter.key[0]] = self.new_by_kind.get(waiter.key[0], 0) + 1
                if self.lanes[NEW]:
                    self.contended.add(waiter.key)
            waiter.future.set_result(None)


class Scheduler:
    """A work queue keyed by object: deduplicated wake-ups, delayed requeues, one pass per key
    at a time (a wake-up during a pass runs it again right after), ``workers`` passes at once,
    passes woken by a change before those only a requeue timer woke (see :class:`Slots`)."""

    def __init__(self, run: PassFn, workers: int = 4, for_new: int = 0) -> None:
        self.run = run
        self.loop = asyncio.get_running_loop()
        self.slots = Slots(workers, for_new=for_new)
        # Passes run in threads of their own: asyncio's default executor has only cores + 4 threads.
        self.executor = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="slipway-pass")
        self.timers: dict[Key, tuple[float, asyncio.TimerHandle]] = {}
        self.requeued: set[Key] = set()  # keys whose next pass only their own requeue timer asked for
        self.running: set[Key] = set()
        self.again: set[Key] = set()
        self.failures: dict[Key, int] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.passes = 0
        # False on a replica that stands by (another holds the leader lease): wake-ups are kept in
        # ``pending`` and no pass starts; ``resume`` runs them when this replica leads.
        self.active = True
        self.pending: set[Key] = set()
        self.started: dict[Key, float] = {}  # loop time each running pass got its slot (liveness)
        self.critical: set[Key] = set()  # keys whose passes take the critical lane (see Slots)
        self.passed: set[Key] = set()  # keys that had a pass in this process (the others are new)

    def wake(self, key: Key, delay: float = 0.0, *, requeue: bool = False) -> None:
        """Run a pass of ``key`` within ``delay`` seconds (an earlier wake-up wins). ``requeue``:
        the pass asked for it itself (time is the input), which waits behind passes woken by a
        change. Event loop only; nothing once the loop is closed (a pass that ends as the operator
        stops has nothing to come back to)."""
        if self.loop.is_closed():
            return
        when = self.loop.time() + max(0.0, delay)
        scheduled = self.timers.get(key)
        if not requeue:
            self.requeued.discard(key)
            self.slots.promote(key)
        elif scheduled is None:
            self.requeued.add(key)
        if scheduled is not None:
            if scheduled[0] <= when:
                return
            scheduled[1].cancel()
        self.timers[key] = (when, self.loop.call_at(when, self._fire, key))

    def wake_threadsafe(self, key: Key, delay: float = 0.0) -> None:
        self.loop.call_soon_threadsafe(self.wake, key, delay)

    def _fire(self, key: Key) -> None:
        self.timers.pop(key, None)
        urgent = key not in self.requeued
        self.requeued.discard(key)
        if not self.active:
            self.pending.add(key)
            return
        if key in self.running:
            if key in self.started:  # a pass that has not started yet reads the freshest object anyway
                self.again.add(key)
            return
        self.running.add(key)
        task = asyncio.create_task(self._pass(key, urgent), name=f"slipway pass {'/'.join(key)}")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def backlog(self) -> int:
        """Objects waiting for their first pass (any thread: a deque's length)."""
        return len(self.slots.lanes[NEW])

    def mark_critical(self, key: Key, critical: bool) -> None:
        """``key``'s passes are time-critical (an active rollout) or no longer; any thread."""
        if critical:
            self.critical.add(key)
        else:
            self.critical.discard(key)

    async def _pass(self, key: Key, urgent: bool = True) -> None:
        requeue: float | None
        lane = CRITICAL if key in self.critical else TIMED if not urgent else URGENT if key in self.passed else NEW
        try:
            lane = await self.slots.acquire(key, lane)
            seconds = None  # how long the pass took (None: it did not run, or it failed)
            try:
                if not self.active:  # leadership lost while this pass waited for a slot
                    self.pending.add(key)
                    self.again.discard(key)
                    return
                self.passes += 1
                self.passed.add(key)
                self.started[key] = self.loop.time()
                try:
                    call = functools.partial(contextvars.copy_context().run, self.run, key)
                    requeue = await self.loop.run_in_executor(self.executor, call)
                    seconds = self.loop.time() - self.started[key]
                finally:
                    self.started.pop(key, None)
            finally:
                self.slots.release(lane, key, seconds)
            self.failures.pop(key, None)
        except kopf.TemporaryError as exc:  # outside a pass's own frame (reading its object): back off too
            count = self.failures.get(key, 0)
            self.failures[key] = count + 1
            requeue = max(float(exc.delay or 0), ERROR_DELAYS[min(count, len(ERROR_DELAYS) - 1)])
        except Exception:
            count = self.failures.get(key, 0)
            self.failures[key] = count + 1
            requeue = ERROR_DELAYS[min(count, len(ERROR_DELAYS) - 1)]
            log.exception("reconciliation of %s failed; retrying in %.0fs", "/".join(key), requeue)
        finally:
            self.running.discard(key)
        if key in self.again:
            self.again.discard(key)
            self.wake(key)
        elif requeue is not None:  # 0: again at once, as a change would (the pass is not done)
            self.wake(key, requeue, requeue=requeue > 0)

    def forget(self, key: Key) -> None:
        """The object is gone: drop its timer."""
        scheduled = self.timers.pop(key, None)
        if scheduled is not None:
            scheduled[1].cancel()
        self.failures.pop(key, None)
        self.pending.discard(key)
        self.requeued.discard(key)
        self.critical.discard(key)
        self.passed.discard(key)

    def pause(self) -> None:
        """Stand by: wake-ups are kept, no new pass starts (passes already running finish)."""
        self.active = False

    def resume(self, keys: Iterable[Key] = ()) -> None:
        """Lead: run every wake-up kept while standing by, and a pass of each of ``keys``, now."""
        self.active = True
        for key in (*self.pending, *keys):
            self.wake(key)
        self.pending.clear()

    def overdue(self, limit: float) -> list[tuple[Key, float]]:
        """Passes running for longer than ``limit`` seconds, with their ages (a stuck thread)."""
        now = self.loop.time()
        return [(key, now - since) for key, since in self.started.items() if now - since > limit]

    async def drain(self, timeout: float) -> bool:
        """True once no pass is running (timers aside), waiting at most ``timeout`` seconds."""
        deadline = self.loop.time() + timeout
        while self.running and self.loop.time() < deadline:
            await asyncio.sleep(0.1)
        return not self.running

    async def idle(self, timeout: float) -> bool:
        """True once no pass is running and none is due within a second (for tests)."""
        deadline = self.loop.time() + timeout
        while self.loop.time() < deadline:
            soon = any(when <= self.loop.time() + 1 for when, _ in self.timers.values())
            if not self.running and not soon:
                return True
            await asyncio.sleep(0.1)
        return False


@dataclass
class Cache:
    """Read access to kopf's indexes (live: kopf updates them as events arrive), plus the status
    each pass wrote, so that a pass never reads its object older than its own last write."""

    indexes: Mapping[str, Any]
    written: dict[Key, dict[str, Any]] = field(default_factory=dict)
    # Deployments whose followed alias may have moved (an artifact of their model changed).
    alias_stale: set[Key] = field(default_factory=set)
    # uids of objects deleted while a watch was away, that kopf's indexes still hold (see ``resync``).
    gone: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def select(self, index: str, *key: str) -> list[dict[str, Any]]:
        """The objects of ``index`` under ``key`` (see the index functions in ``watches``). Passes run in
        worker threads while kopf changes its stores on the event loop: a copy that a change interrupted
        (``RuntimeError``: changed size during iteration) is made again."""
        for _ in range(READ_ATTEMPTS - 1):
            try:
                return self._copy(index, key)
            except RuntimeError:
                continue
        return self._copy(index, key)

    def _copy(self, index: str, key: tuple[str, ...]) -> list[dict[str, Any]]:
        store = self.indexes[index].get(key)
        if not store:
            return []
        found = [dict(v) for v in list(store)]
        if self.gone:
            found = [v for v in found if (v.get("metadata") or {}).get("uid") not in self.gone]
        return found

    def get(self, index: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object of that name in the index, or None."""
        found = self.select(index, "name", namespace, name)
        return found[0] if found else None

    def owned_by(self, index: str, uid: str) -> list[dict[str, Any]]:
        """Objects in the index whose controller is the object ``uid``."""
        return self.select(index, "owner", uid)

    def referencing(self, index: str, namespace: str, name: str) -> list[dict[str, Any]]:
        """Objects in the index whose spec references ``name`` (see the index functions)."""
        return self.select(index, "ref", namespace, name)

    def parent(self, key: Key) -> dict[str, Any] | None:
        """A Slipway object as the freshest of the watch and this operator's own last write."""
        plural, namespace, name = key
        cached = self.get(plural, namespace, name)
        with self.lock:
            mine = self.written.get(key)
        if cached is None:
            return None
        same_object = mine is not None and mine["metadata"].get("uid") == cached["metadata"].get("uid")
        # At the same revision the operator's copy is the API server's answer to its own write: never older.
        return mine if same_object and mine is not None and _revision(mine) >= _revision(cached) else cached

    def remember(self, key: Key, obj: dict[str, Any]) -> None:
        with self.lock:
            self.written[key] = obj

    def forget(self, key: Key) -> None:
        with self.lock:
            self.written.pop(key, None)


def _revision(obj: Mapping[str, Any]) -> int:
    """The resourceVersion as a number (etcd's revision); 0 when it is not one."""
    value = str(obj.get("metadata", {}).get("resourceVersion") or "")
    return int(value) if value.isdigit() else 0


def fingerprint(body: Mapping[str, Any]) -> tuple[Any, ...]:
    """What of a Slipway object, besides its status, a pass depends on: a change wakes it."""
    meta = body.get("metadata") or {}
    annotations = {
        k: v
        for k, v in (meta.get("annotations") or {}).items()
        if k != "kubectl.kubernetes.io/last-applied-configuration"
    }
    return (
        meta.get("uid"),
        meta.get("generation"),
        tuple(sorted(annotations.items())),
        meta.get("deletionTimestamp"),
        tuple(meta.get("finalizers") or ()),
    )


def owner_keys(obj: Mapping[str, Any], plurals: Mapping[str, str]) -> Iterable[Key]:
    """The Slipway objects that control ``obj`` (by its controller ownerReference)."""
    meta = obj.get("metadata") or {}
    for ref in meta.get("ownerReferences") or []:
        plural = plurals.get(str(ref.get("kind")))
        if ref.get("controller") and plural and str(ref.get("apiVersion", "")).startswith("slipway.dev/"):
            yield (plural, str(meta.get("namespace")), str(ref.get("name")))
