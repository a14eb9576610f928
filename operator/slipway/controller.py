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
import contextvars
import functools
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf

from slipway.packed import unpacked
from slipway.slots import CRITICAL, NEW, TIMED, URGENT, Key, Slots

log = logging.getLogger(__name__)

PassFn = Callable[[Key], "float | None"]

READ_ATTEMPTS = 10  # copies of an index store tried while kopf changes it on the event loop
# Backoff for passes that fail with an unexpected error (seconds), by consecutive failures.
ERROR_DELAYS = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
# Keys remembered as having had a pass. A wake-up can name an object that does not exist (a child's
# ownerReference names any owner a tenant writes), and its pass still counts: past this many, the
# least recently passed is forgotten (its next pass takes the lane of a first pass, nothing else).
PASSED_LIMIT = 20_000


class RecentKeys:
    """A set of at most ``limit`` keys: adding one past the limit forgets the least recently added."""

    def __init__(self, limit: int) -> None:
        self.limit = max(1, limit)
        self.keys: OrderedDict[Key, None] = OrderedDict()

    def add(self, key: Key) -> None:
        self.keys[key] = None
        self.keys.move_to_end(key)
        while len(self.keys) > self.limit:
            self.keys.popitem(last=False)

    def discard(self, key: Key) -> None:
        self.keys.pop(key, None)

    def __contains__(self, key: object) -> bool:
        return key in self.keys

    def __len__(self) -> int:
        return len(self.keys)


class Scheduler:
    """A work queue keyed by object: deduplicated wake-ups, delayed requeues, one pass per key
    at a time (a wake-up during a pass runs it again right after), ``workers`` passes at once,
    passes woken by a change before those only a requeue timer woke (see :class:`Slots`)."""

    def __init__(self, run: PassFn, workers: int = 4, for_new: int = 0, passed_limit: int = PASSED_LIMIT) -> None:
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
        self.passed = RecentKeys(passed_limit)  # keys that had a pass in this process (the others are new)

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
    # Objects marked by topic: something they read may have changed outside the cluster (an alias they
    # follow moved); their next pass takes the mark and reads it again.
    marks: set[tuple[Key, str]] = field(default_factory=set)
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

    def keys(self, index: str) -> list[tuple[str, ...]]:
        """Every key of ``index``, copied again while kopf changes it, as :meth:`select`."""
        for _ in range(READ_ATTEMPTS - 1):
            try:
                return list(self.indexes[index])
            except RuntimeError:
                continue
        return list(self.indexes[index])

    def names(self, index: str) -> list[str]:
        """The names of every object in ``index`` (its ``("name", namespace, name)`` keys), copied
        again while kopf changes it, as :meth:`select`."""
        for _ in range(READ_ATTEMPTS - 1):
            try:
                return [key[2] for key in list(self.indexes[index]) if key[0] == "name"]
            except RuntimeError:
                continue
        return [key[2] for key in list(self.indexes[index]) if key[0] == "name"]

    def _copy(self, index: str, key: tuple[str, ...]) -> list[dict[str, Any]]:
        store = self.indexes[index].get(key)
        if not store:
            return []
        found = [unpacked(v) for v in list(store)]
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
        # Newer than the watch's: the API server's answer to the operator's own write, not delivered yet.
        # At the same revision both are that answer: the cache's, and the copy is forgotten.
        if same_object and mine is not None and _revision(mine) > _revision(cached):
            return mine
        if mine is not None:
            self.caught_up(key, cached)
        return cached

    def mark(self, key: Key, topic: str) -> None:
        self.marks.add((key, topic))

    def take_mark(self, key: Key, topic: str) -> bool:
        """Whether ``key`` was marked with ``topic``; the mark is cleared."""
        try:
            self.marks.remove((key, topic))
        except KeyError:
            return False
        return True

    def remember(self, key: Key, obj: dict[str, Any]) -> None:
        """Keep the answer to the operator's own write until the watch delivers that revision. Not kept
        when the watch was quicker than the answer: the cache holds that revision (or a newer) already,
        and nothing would forget the copy while the object is at rest."""
        seen = self.get(key[0], key[1], key[2])
        same = seen is not None and (seen.get("metadata") or {}).get("uid") == (obj.get("metadata") or {}).get("uid")
        if same and seen is not None and _revision(seen) >= _revision(obj) > 0:
            return
        with self.lock:
            self.written[key] = obj

    def forget(self, key: Key) -> None:
        with self.lock:
            self.written.pop(key, None)

    def caught_up(self, key: Key, seen: Mapping[str, Any]) -> None:
        """The watch delivered ``key`` as ``seen`` (and kopf indexed it before any handler ran): the
        operator's own last write, if no newer, is forgotten, since the cache holds that revision now
        (at rest nothing is kept twice)."""
        with self.lock:
            mine = self.written.get(key)
            if mine is not None and _revision(mine) <= _revision(seen):
                del self.written[key]


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
