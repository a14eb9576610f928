"""Leader election with a ``coordination.k8s.io/v1`` Lease, as Go controllers do (client-go's
``leaderelection``): any number of replicas, one reconciles, the others stand by.

Every replica watches and caches everything (kopf), so a standby is ready at once; only the
holder of the Lease ``slipway-operator`` runs reconciliation passes. Every ``retry`` seconds,
counted from the previous *send*, the holder writes ``renewTime`` and a standby reads the Lease.
A standby takes the Lease when it is absent, released (no holder), or unchanged for
``leaseDurationSeconds`` as measured on the standby's own monotonic clock since it last saw it
change: clocks of different nodes are never compared. Every write carries the
``resourceVersion`` it read, so of two replicas that try at once the API server lets exactly one
win; the other gets 409 Conflict.

Fencing: a leader whose last successful renewal was *sent* ``renew_deadline`` seconds ago (or
that finds the Lease taken) has lost it, ``duration - renew_deadline`` seconds before any standby
may take over, and calls ``on_lost``: the operator exits at once (as controller-runtime does), so
that no pass in flight writes again. A watchdog thread (:class:`Fence`) checks the same deadline
independently of the event loop, so a blocked loop cannot keep a stale leader alive. On a clean
shutdown the Lease is released only after every pass has finished, so that a standby takes over
at its next read instead of after the lease duration.

The pure decisions (``decide``, ``claim``, ``released``) and the I/O (``LeaseStore``, blocking)
are :mod:`slipway.lease`; this module is the loop (``LeaderElector.run``, an asyncio task), which
runs the I/O in one thread of its own so that busy reconciliation threads never delay a renewal.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from slipway.lease import LEASE_NAME, Decision, LeaseConflict, LeaseRecord, Observation, claim, decide, released

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Timing:
    """Seconds, with client-go's meanings and defaults: a Lease unrenewed for ``duration`` may be
    taken over; a leader that has not renewed for ``renew_deadline`` (from the send of its last
    successful renewal) has lost it; every ``retry`` the leader renews and a standby reads."""

    duration: float = 15.0
    renew_deadline: float = 10.0
    retry: float = 2.0

    def __post_init__(self) -> None:
        if min(self.duration, self.renew_deadline, self.retry) <= 0:
            raise ValueError("lease duration, renew deadline and retry period must be positive")
        if self.renew_deadline >= self.duration:
            raise ValueError(
                f"the renew deadline ({self.renew_deadline:g}s) must be shorter than the lease duration "
                f"({self.duration:g}s): a leader must stop before a standby may take over"
            )
        if 2 * self.retry > self.renew_deadline:
            raise ValueError(
                f"the retry period ({self.retry:g}s) must be at most half the renew deadline "
                f"({self.renew_deadline:g}s): a leader gets at least two tries before it stops"
            )

    @property
    def request_timeout(self) -> float:
        """One Lease request may take this long: half the deadline, so that a slow answer is retried once."""
        return self.renew_deadline / 2

    @property
    def fence_grace(self) -> float:
        """The watchdog trips this long after the renew deadline: a quarter of the margin before a
        standby may take over, so the event loop, when it runs, notices first and says why."""
        return (self.duration - self.renew_deadline) / 4


class LeaderElector:
    """Acquires and renews the Lease in a loop; calls ``on_lead`` when this replica becomes the
    leader and ``on_lost(why)`` when it stops being one without having resigned (both on the
    event loop). A replica leads at most once: after ``on_lost`` it never leads again."""

    def __init__(
        self,
        store: Any,  # LeaseStore, or a fake with get/create/update
        identity: str,
        timing: Timing,
        on_lead: Callable[[], None],
        on_lost: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.store = store
        self.identity = identity
        self.timing = timing
        self.on_lead = on_lead
        self.on_lost = on_lost
        self.clock = clock
        self.now = now
        self.leading = False
        self.lost: str | None = None  # why this replica stopped leading, once it has
        self.holder: str | None = None  # the holder last seen (for logs and the probe)
        self.observation = Observation(clock)
        self.renewed_at = 0.0  # clock() when the last successful write was sent
        self.mine: LeaseRecord | None = None  # the Lease as this replica last wrote it
        self.task: asyncio.Task[None] | None = None
        self._error: str | None = None
        self._logged_holder: str | None = None
        # One thread of its own: renewals never wait behind reconciliation passes.
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="slipway-lease")

    @property
    def where(self) -> str:
        return f"Lease {getattr(self.store, 'namespace', '?')}/{getattr(self.store, 'name', LEASE_NAME)}"

    def expired(self, grace: float = 0.0) -> bool:
        """True when this replica led and its last successful renewal was sent ``renew_deadline`` (plus
        ``grace``) ago."""
        return self.leading and self.clock() - self.renewed_at >= self.timing.renew_deadline + grace

    def time_left(self) -> float:
        """Seconds before this replica's renew deadline (0 when it does not lead): what a side effect
        outside the API server (an MLflow write) may still take. After it this replica stops, and a
        standby leads ``duration - renew_deadline`` seconds later at the earliest."""
        if not self.leading or self.lost is not None:
            return 0.0
        return max(0.0, self.renewed_at + self.timing.renew_deadline - self.clock())

    # ------------------------------------------------------------------ blocking (the lease thread)

    def attempt(self) -> bool:
        """One try to create, acquire or renew the Lease. True if this replica holds it now."""
        if self.mine is not None:
            # Renew what this replica wrote last without reading it first: one request. A 409
            # means someone else wrote since; read and decide.
            try:
                return self._write(claim(self.mine, self.identity, self.now(), self.timing.duration), create=False)
            except LeaseConflict:
                self.mine = None
        record = self.store.get()
        self.observation.see(record)
        self.holder = record.holder if record is not None else None
        decision = decide(record, self.identity, self.observation.age())
        if decision is Decision.STANDBY:
            return False
        try:
            new = claim(record, self.identity, self.now(), self.timing.duration)
            return self._write(new, create=decision is Decision.CREATE)
        except LeaseConflict:
            return False  # another replica won this round

    def _write(self, record: LeaseRecord, create: bool) -> bool:
        written = self.store.create(record) if create else self.store.update(record)
        self.mine = written
        self.holder = written.holder
        self.observation.see(written)
        return True

    def _give_up_if_held(self) -> bool:
        held = self.mine is not None
        self.give_up()
        return held

    def give_up(self) -> None:
        """Release the Lease (blocking): the next replica takes over at its next read."""
        if self.mine is None:
            return
        with contextlib.suppress(LeaseConflict):  # someone else holds it already
            self.store.update(released(self.mine, self.now()))
        self.mine = None

    # ------------------------------------------------------------------ the loop (event loop)

    def start(self) -> asyncio.Task[None]:
        self.task = asyncio.create_task(self.run(), name="slipway leader election")
        return self.task

    async def run(self) -> None:
        """Acquire and renew until cancelled or lost."""
        try:
            await self._loop()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("leader election: the loop failed (the liveness check now fails)")
            self._lose(f"leader election failed: {_describe(exc)}")
            raise

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        log.info(
            "leader election: %s as %r (lease %gs, renew deadline %gs, retry every %gs)",
            self.where,
            self.identity,
            self.timing.duration,
            self.timing.renew_deadline,
            self.timing.retry,
        )
        while self.lost is None:
            sent = self.clock()
            held: bool | None
            try:
                future = loop.run_in_executor(self._executor, self.attempt)
                # A leader never waits for an answer past its renew deadline. ``asyncio.timeout``, not
                # ``wait_for``: on Python 3.11 ``wait_for`` returns an answer that lands in the same turn
                # as a cancel and drops the cancel, and then shutdown waits on this loop forever.
                deadline = loop.time() + self.renewed_at + self.timing.renew_deadline - sent if self.leading else None
                async with asyncio.timeout_at(deadline):
                    held = await future
                self._error = None
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                held = None
                self._failed(exc)
            if held and not self.leading and self.clock() - sent >= self.timing.renew_deadline:
                held = None  # acquired, but the answer came after the deadline: renew before leading
            if held:
                self.renewed_at = sent  # the deadline counts from the send, not the answer
                self._become_leader()
            elif held is False:
                if self.leading:
                    self._lose(f"taken by {self.holder!r}")
                else:
                    self._standing_by()
            elif self.expired():
                self._lose(f"not renewed for {self.timing.renew_deadline:g}s ({self._error})")
            # The next try is due ``retry`` after this one was sent, however long its answer took.
            await asyncio.sleep(max(0.0, sent + self.timing.retry - self.clock()))

    def _failed(self, exc: BaseException) -> None:
        text = _describe(exc)
        if text != self._error:  # once per distinct error, not every retry
            log.warning("leader election: %s: %s; retrying every %gs", self.where, text, self.timing.retry)
        self._error = text

    def _become_leader(self) -> None:
        if self.leading:
            return
        self.leading = True
        log.info("leader election: %r leads (%s): reconciling", self.identity, self.where)
        self.on_lead()

    def _standing_by(self) -> None:
        if self.holder != self._logged_holder:
            self._logged_holder = self.holder
            log.info("leader election: %r stands by: %s held by %r", self.identity, self.where, self.holder)

    def _lose(self, why: str) -> None:
        if not self.leading or self.lost is not None:
            return
        self.leading = False
        self.lost = why
        log.critical("leader election: %r lost %s (%s)", self.identity, self.where, why)
        self.on_lost(why)

    async def resign(self) -> None:
        """Stop the loop (shutdown): no more renewals; the Lease is still held until ``release``."""
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        self.leading = False

    async def release(self, timeout: float = 5.0) -> None:
        """Release the Lease if this replica holds it, so a standby takes over at once."""
        loop = asyncio.get_running_loop()
        try:
            # In the lease thread, after any attempt still running there (it may just have taken the Lease).
            async with asyncio.timeout(timeout):
                held = await loop.run_in_executor(self._executor, self._give_up_if_held)
            if held:
                log.info("leader election: %r released %s", self.identity, self.where)
        except Exception as exc:
            log.warning("leader election: could not release %s: %s", self.where, _describe(exc))
        finally:
            self._executor.shutdown(wait=False)


class Fence:
    """A watchdog thread, independent of the event loop: once the elector has held the Lease past
    its renew deadline (plus ``Timing.fence_grace``, still well before a standby may take over)
    without renewing, ``trip`` is called (the operator exits). The event loop notices the deadline
    itself; this catches a loop that is blocked."""

    def __init__(self, elector: LeaderElector, trip: Callable[[str], None], period: float = 0.25) -> None:
        self.elector = elector
        self.trip = trip
        self.period = period
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._watch, name="slipway-fence", daemon=True)

    def start(self) -> Fence:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopped.set()

    def _watch(self) -> None:
        while not self.stopped.wait(self.period):
            if self.elector.expired(self.elector.timing.fence_grace):
                since = self.elector.clock() - self.elector.renewed_at
                self.trip(
                    f"{self.elector.where} not renewed for {since:.1f}s (deadline "
                    f"{self.elector.timing.renew_deadline:g}s; the event loop did not notice)"
                )
                return


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        reason = f"API server answered {exc.status} {exc.reason}"
        if exc.status == 403:
            reason += " (RBAC: the operator's Role for leases in manifests/)"
        if exc.status == 404:
            reason += " (does the namespace exist? --leader-election-namespace, or --standalone)"
        return reason
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    return f"{type(exc).__name__}: {exc}"
