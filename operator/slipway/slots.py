"""Slots: how many reconciliation passes run at once, and who gets a freed slot (pure asyncio).

Passes wait in four lanes (see :class:`Slots`); within a lane, namespaces take turns: a freed
slot goes to the waiter of the namespace with the fewest passes running (the oldest such waiter),
and a namespace that holds :data:`NAMESPACE_SHARE` of the slots gets no more while another
namespace waits for one it could take. So one namespace's burst (500 objects applied at once)
never holds every slot, and another namespace's waiter is granted one of the next slots freed
that its lane may use: at most one for each namespace with no more passes running that waited
before it (whatever the number of objects waiting), the first one freed when none did. A slot
frees when a pass ends; a pass is bounded by the operator's timeouts (each API or MLflow call
10 s, a stuck pass fails liveness after SLIPWAY_STUCK_PASS_SECONDS).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections import deque
from dataclasses import dataclass

Key = tuple[str, str, str]  # (plural, namespace, name) of a Slipway object

CRITICAL, NEW, URGENT, TIMED = "critical", "new", "urgent", "timed"
AGEING_SECONDS = 30.0  # a timed pass that has waited this long goes before passes a change woke
# The oldest waiter of a kind none of whose first passes runs, once it has waited this long, goes
# before quicker kinds' first passes.
NEW_AGEING_SECONDS = 10.0
FIRST_PASS_WEIGHT = 0.2  # weight of the latest first pass in its kind's moving average of durations
# The share of all slots one namespace may hold while another namespace waits (rounded up, at least 1).
NAMESPACE_SHARE = 0.5


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

    A freed slot goes to a critical waiter, then to a new one, then to a timed one that has waited
    ``ageing`` seconds (so a stream of changes never starves a poll for ever), then to an urgent
    one, then to a timed one. Among the waiters of a lane, namespaces take turns: the namespace
    with the fewest passes running goes first (its oldest waiter; for first passes, by the kinds'
    rule above among its waiters), and a namespace running ``namespace_share`` of the ``size``
    slots (rounded up) gets none while another namespace waits for a slot it may take."""

    def __init__(
        self,
        size: int,
        reserved: int = 1,
        ageing: float = AGEING_SECONDS,
        for_new: int = 0,
        new_ageing: float = NEW_AGEING_SECONDS,
        namespace_share: float = NAMESPACE_SHARE,
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
        self.by_namespace: dict[str, int] = {}  # passes running, by namespace
        self.namespace_cap = max(1, math.ceil(size * namespace_share))

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
        """Who gets a free slot now: first among the namespaces under their cap, then (nobody of
        theirs waits for a slot that fits) among all."""
        waiter = self._pick(now, capped=True)
        if waiter is None and any(n >= self.namespace_cap for n in self.by_namespace.values()):
            waiter = self._pick(now, capped=False)
        return waiter

    def _pick(self, now: float, capped: bool) -> Waiter | None:
        """By the lanes' order, the fairest waiter (:meth:`_fairest`); ``capped``: none of a
        namespace that holds its cap."""

        def lane(name: str) -> list[Waiter]:
            if not capped:
                return list(self.lanes[name])
            return [w for w in self.lanes[name] if self.by_namespace.get(w.key[1], 0) < self.namespace_cap]

        if self._fits(CRITICAL) and (critical := lane(CRITICAL)):
            return self._fairest(critical)
        if self._fits(NEW) and (new := lane(NEW)):
            return self._first_of_new(now, new)
        if not self._fits(URGENT):
            return None
        timed = lane(TIMED)
        aged = [w for w in timed if now - w.since >= self.ageing]
        return self._fairest(aged or lane(URGENT) or timed)

    def _fairest(self, waiters: list[Waiter]) -> Waiter | None:
        """The oldest waiter of the namespace with the fewest passes running (``waiters`` oldest first)."""
        return min(waiters, key=lambda w: self.by_namespace.get(w.key[1], 0)) if waiters else None

    def _first_of_new(self, now: float, waiters: list[Waiter]) -> Waiter:
        """Among the waiters of the namespace with the fewest passes running (``waiters`` oldest
        first): the oldest of a kind none of whose first passes runs, if it has waited
        ``new_ageing`` seconds; else the oldest of the kind whose first passes have been quickest
        (a kind not measured yet first while none of its first passes runs, last while one does;
        then the oldest)."""
        fewest = min(self.by_namespace.get(w.key[1], 0) for w in waiters)
        namespace = next(w.key[1] for w in waiters if self.by_namespace.get(w.key[1], 0) == fewest)
        first: dict[str, Waiter] = {}  # the oldest waiter of each kind, oldest first
        for waiter in waiters:
            if waiter.key[1] == namespace:
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
        waited when it got its slot. ``key`` is needed: its namespace (and a first pass's kind) is counted."""
        if key is None:
            raise ValueError("a pass is released with its key (its namespace's count, a first pass's kind)")
        self.busy[lane] -= 1
        self.by_namespace[key[1]] -= 1
        if not self.by_namespace[key[1]]:
            del self.by_namespace[key[1]]
        if lane == NEW:
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
            self.by_namespace[waiter.key[1]] = self.by_namespace.get(waiter.key[1], 0) + 1
            if waiter.lane == NEW:
                self.new_by_kind[waiter.key[0]] = self.new_by_kind.get(waiter.key[0], 0) + 1
                if self.lanes[NEW]:
                    self.contended.add(waiter.key)
            waiter.future.set_result(None)
