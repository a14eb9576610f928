"""Leader election: the pure decisions on a Lease, two electors racing on one (fake) Lease with a
resourceVersion, the loop's transitions, and the scheduler standing by while another replica leads."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import kopf
import pytest

from localkube.wait import until
from slipway.__main__ import build_parser, main
from slipway.config import OperatorConfig
from slipway.controller import Cache, Key, Scheduler
from slipway.leader import Fence, LeaderElector, Timing
from slipway.lease import Decision, LeaseConflict, LeaseRecord, claim, decide, released
from slipway.operator import known_keys, reconciliation_probe

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def held_by(holder: str, **fields: Any) -> LeaseRecord:
    return LeaseRecord(holder=holder, duration=15.0, acquired=T0, renewed=T0, transitions=2, version="7", **fields)


# --------------------------------------------------------------------------- decisions


def test_an_absent_lease_is_created() -> None:
    assert decide(None, "a", observed_for=0) is Decision.CREATE


def test_a_lease_held_by_this_replica_is_renewed_however_old() -> None:
    assert decide(held_by("a"), "a", observed_for=0) is Decision.RENEW
    assert decide(held_by("a"), "a", observed_for=100) is Decision.RENEW


def test_a_fresh_lease_held_by_another_replica_means_standing_by() -> None:
    assert decide(held_by("b"), "a", observed_for=0) is Decision.STANDBY
    assert decide(held_by("b"), "a", observed_for=14.9) is Decision.STANDBY


def test_a_lease_unchanged_for_its_duration_is_expired_and_taken() -> None:
    assert decide(held_by("b"), "a", observed_for=15.0) is Decision.ACQUIRE


def test_expiry_uses_the_duration_the_holder_wrote_not_ours() -> None:
    short = dataclasses.replace(held_by("b"), duration=3.0)
    assert decide(short, "a", observed_for=3.0) is Decision.ACQUIRE
    long = dataclasses.replace(held_by("b"), duration=60.0)
    assert decide(long, "a", observed_for=30.0) is Decision.STANDBY


def test_a_released_lease_is_taken_at_once() -> None:
    assert decide(released(held_by("b"), T0), "a", observed_for=0) is Decision.ACQUIRE


def test_claims_create_renew_and_take_over() -> None:
    now = T0 + timedelta(seconds=30)
    created = claim(None, "a", now, 15)
    assert (created.holder, created.acquired, created.renewed, created.transitions, created.version) == (
        "a",
        now,
        now,
        0,
        "",
    )
    renewed = claim(held_by("a"), "a", now, 15)
    assert (renewed.acquired, renewed.renewed, renewed.transitions, renewed.version) == (T0, now, 2, "7")
    taken = claim(held_by("b"), "a", now, 15)
    assert (taken.holder, taken.acquired, taken.transitions, taken.version) == ("a", now, 3, "7")


def test_release_empties_the_holder_and_keeps_the_version() -> None:
    gone = released(held_by("a"), T0 + timedelta(seconds=1))
    assert (gone.holder, gone.duration, gone.version, gone.transitions) == ("", 1.0, "7", 2)


@pytest.mark.parametrize(
    ("duration", "deadline", "retry"),
    [(15, 15, 2), (15, 20, 2), (15, 10, 6), (0, 5, 2), (15, 10, -1)],
)
def test_timings_that_would_let_two_replicas_lead_are_refused(duration: float, deadline: float, retry: float) -> None:
    with pytest.raises(ValueError):
        Timing(duration, deadline, retry)


def test_the_defaults_are_client_gos() -> None:
    assert (Timing().duration, Timing().renew_deadline, Timing().retry) == (15.0, 10.0, 2.0)
    assert Timing().request_timeout == 5.0


# --------------------------------------------------------------------------- electors on one Lease


class FakeStore:
    """One Lease with a resourceVersion: a write with an old version is a conflict, like the API server."""

    namespace, name = "ns", "slipway-operator"

    def __init__(self) -> None:
        self.lease: LeaseRecord | None = None
        self.revision = 0
        self.calls: list[str] = []
        self.down = False

    def _store(self, record: LeaseRecord) -> LeaseRecord:
        self.revision += 1
        self.lease = dataclasses.replace(record, version=str(self.revision))
        return self.lease

    def get(self) -> LeaseRecord | None:
        self.calls.append("get")
        if self.down:
            raise OSError("connection refused")
        return self.lease

    def create(self, record: LeaseRecord) -> LeaseRecord:
        self.calls.append("create")
        if self.lease is not None:
            raise LeaseConflict("exists")
        return self._store(record)

    def update(self, record: LeaseRecord) -> LeaseRecord:
        self.calls.append("update")
        if self.down:
            raise OSError("connection refused")
        if self.lease is None or record.version != self.lease.version:
            raise LeaseConflict("changed")
        return self._store(record)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def elector(store: FakeStore, identity: str, clock: Clock, events: list[str] | None = None) -> LeaderElector:
    log = events if events is not None else []
    return LeaderElector(
        store,
        identity,
        Timing(),
        on_lead=lambda: log.append(f"{identity} leads"),
        on_lost=lambda why: log.append(f"{identity} lost: {why}"),
        clock=clock,
        now=lambda: T0 + timedelta(seconds=clock.t),
    )


def test_the_first_replica_creates_the_lease_the_second_stands_by_until_it_expires() -> None:
    store, clock = FakeStore(), Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    assert a.attempt() is True
    assert b.attempt() is False and b.holder == "a"
    clock.t += 10
    assert b.attempt() is False  # seen unchanged for 10 s of 15
    assert a.attempt() is True  # a renews: b sees a change at its next read and counts again
    assert b.attempt() is False
    clock.t += 14
    assert b.attempt() is False
    clock.t += 1
    assert b.attempt() is True  # 15 s without a renewal: b takes over
    assert store.lease is not None and (store.lease.holder, store.lease.transitions) == ("b", 1)
    assert a.attempt() is False and a.holder == "b"  # a's renewal conflicts; it reads and stands by


def test_a_standby_that_just_started_waits_a_full_duration_on_a_held_lease() -> None:
    store, clock = FakeStore(), Clock()
    elector(store, "old", clock).attempt()
    clock.t += 600  # the holder died long ago, but this replica's clock is the only one it trusts
    late = elector(store, "new", clock)
    assert late.attempt() is False
    clock.t += 15
    assert late.attempt() is True


def test_two_replicas_racing_for_an_absent_lease_one_wins() -> None:
    store, clock = FakeStore(), Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    original_get = store.get
    store.get = lambda: None  # type: ignore[method-assign]  # both read "absent" before either creates
    assert a.attempt() is True
    assert b.attempt() is False  # its create is a conflict
    store.get = original_get  # type: ignore[method-assign]
    assert store.lease is not None and store.lease.holder == "a"


def test_two_replicas_racing_to_take_an_expired_lease_one_wins() -> None:
    store, clock = FakeStore(), Clock()
    dead, a, b = elector(store, "dead", clock), elector(store, "a", clock), elector(store, "b", clock)
    dead.attempt()
    a.attempt(), b.attempt()
    clock.t += 15
    stale = store.lease
    original_get = store.get
    store.get = lambda: stale  # type: ignore[method-assign]  # both read the same version
    results = [a.attempt(), b.attempt()]
    store.get = original_get  # type: ignore[method-assign]
    assert results == [True, False]
    assert store.lease is not None and store.lease.holder == "a"


def test_the_leader_renews_with_one_request_and_no_read() -> None:
    store, clock = FakeStore(), Clock()
    a = elector(store, "a", clock)
    a.attempt()
    store.calls.clear()
    for _ in range(3):
        clock.t += 5
        assert a.attempt() is True
    assert store.calls == ["update"] * 3


def test_a_released_lease_goes_to_the_standby_at_its_next_read() -> None:
    store, clock = FakeStore(), Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    a.attempt()
    assert b.attempt() is False
    a.give_up()
    assert b.attempt() is True
    assert store.lease is not None and store.lease.holder == "b"


# --------------------------------------------------------------------------- the loop


class SlowStore(FakeStore):
    """Every request answered after ``delay`` seconds (an API server under load)."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay
        self.sent: list[float] = []

    def get(self) -> LeaseRecord | None:
        time.sleep(self.delay)
        return super().get()

    def create(self, record: LeaseRecord) -> LeaseRecord:
        time.sleep(self.delay)
        return super().create(record)

    def update(self, record: LeaseRecord) -> LeaseRecord:
        self.sent.append(time.monotonic())
        time.sleep(self.delay)
        return super().update(record)


def run_elector(store: FakeStore, timing: Timing, scenario: Any) -> tuple[list[str], Any]:
    """Run an elector on ``store`` (real clock) while ``scenario(elector)`` runs; what it reported, and the result."""

    async def main() -> tuple[list[str], Any]:
        events: list[str] = []
        a = LeaderElector(store, "a", timing, on_lead=lambda: events.append("lead"),
                          on_lost=lambda why: events.append(f"lost: {why}"), clock=time.monotonic)  # fmt: skip
        a.start()
        try:
            result = await scenario(a)
        finally:
            await a.resign()
        return events, result

    return asyncio.run(main())


def test_the_loop_leads_renews_and_loses_the_lease_at_the_renew_deadline_counted_from_the_send() -> None:
    store = FakeStore()

    async def scenario(a: LeaderElector) -> tuple[int, float]:
        await until(lambda: a.leading)
        await asyncio.sleep(0.7)
        updates = store.calls.count("update")
        store.down = True
        await until(lambda: a.lost is not None)
        return updates, time.monotonic() - a.renewed_at

    events, (updates, since_renewal) = run_elector(store, Timing(duration=1.2, renew_deadline=1.0, retry=0.1), scenario)
    assert events[0] == "lead" and events[1].startswith("lost: not renewed for 1s")
    assert len(events) == 2
    assert updates >= 5  # renewed every 0.1 s
    # It stops at the renew deadline (1.0 s after its last renewal was sent), before the Lease expires (1.2 s).
    assert 1.0 <= since_renewal < 1.2


def test_a_lone_leader_behind_a_slow_api_server_keeps_its_lease() -> None:
    """A quarter of the renew deadline per request (2.5 s of 10 s at the defaults, scaled by 0.1):
    renewals are sent every retry period from the previous send, so the leader never loses the Lease."""
    store = SlowStore(0.25)

    async def scenario(a: LeaderElector) -> list[float]:
        await until(lambda: a.leading)
        await asyncio.sleep(2.5)
        return store.sent

    events, sent = run_elector(store, Timing(duration=1.5, renew_deadline=1.0, retry=0.2), scenario)
    assert events == ["lead"]
    gaps = [b - a for a, b in zip(sent, sent[1:], strict=False)]
    assert len(sent) >= 8 and max(gaps) < 0.4  # one renewal every 0.25 s (the answer's time), none missed


def test_a_leader_whose_lease_is_taken_loses_it_and_never_leads_again() -> None:
    store = FakeStore()

    async def scenario(a: LeaderElector) -> bool:
        await until(lambda: a.leading)
        assert store.lease is not None
        store.lease = dataclasses.replace(store.lease, holder="b", version="99")  # b took it (an expired view)
        await until(lambda: a.lost is not None)
        store.lease = None  # even a Lease free for the taking is never taken again by a replica that lost one
        await asyncio.sleep(0.3)
        return a.leading

    events, leading = run_elector(store, Timing(duration=1.2, renew_deadline=1.0, retry=0.05), scenario)
    assert events == ["lead", "lost: taken by 'b'"]
    assert leading is False


def test_the_fence_trips_at_the_deadline_when_the_event_loop_is_blocked() -> None:
    store = FakeStore()
    tripped: list[tuple[float, str]] = []

    async def scenario(a: LeaderElector) -> float:
        fence = Fence(a, lambda why: tripped.append((time.monotonic(), why)), period=0.02).start()
        await until(lambda: a.leading)
        time.sleep(1.5)  # the event loop blocked: no renewal, and the loop cannot notice its deadline
        fence.stop()
        return a.renewed_at

    events, renewed_at = run_elector(store, Timing(duration=1.2, renew_deadline=1.0, retry=0.1), scenario)
    [(when, why)] = tripped
    # The deadline plus the fence's grace (0.05 s here), give or take its period; before the Lease expires.
    assert 1.05 <= when - renewed_at < 1.2
    assert "not renewed for" in why and "event loop" in why


def test_with_the_loop_running_the_loop_notices_the_deadline_before_the_fence() -> None:
    # The API server stops answering: the event loop runs and notices the deadline itself, so the reason
    # logged is the loop's (with the last error), never the watchdog's "the event loop did not notice".
    store = FakeStore()
    tripped: list[str] = []

    async def scenario(a: LeaderElector) -> None:
        fence = Fence(a, tripped.append, period=0.005).start()
        await until(lambda: a.leading)
        store.down = True
        await until(lambda: a.lost is not None)
        renewed = a.renewed_at
        await until(lambda: time.monotonic() - renewed > 1.0 + 0.05 + 0.05)  # past the fence's grace, and then some
        fence.stop()

    events, _ = run_elector(store, Timing(duration=1.2, renew_deadline=1.0, retry=0.02), scenario)
    assert events[0] == "lead" and events[1].startswith("lost: not renewed for 1s")
    assert tripped == []


def test_the_loop_stands_by_while_another_replica_holds_the_lease_then_takes_it_over() -> None:
    async def scenario() -> tuple[list[str], float]:
        loop = asyncio.get_running_loop()
        store, events = FakeStore(), []
        store.lease = LeaseRecord("other", 0.5, T0, T0, 0, "1")
        b = LeaderElector(store, "b", Timing(duration=0.5, renew_deadline=0.4, retry=0.05),
                          on_lead=lambda: events.append("lead"), on_lost=lambda why: events.append("lost"),
                          clock=loop.time)  # fmt: skip
        start = loop.time()
        b.start()
        await asyncio.sleep(0.2)
        events.append(f"leading={b.leading}")
        while not b.leading and loop.time() - start < 5:
            await asyncio.sleep(0.01)
        took = loop.time() - start
        await b.resign()
        await b.release()
        events.append(f"holder={store.lease.holder!r}" if store.lease else "gone")
        return events, took

    events, took = asyncio.run(scenario())
    assert events == ["leading=False", "lead", "holder=''"]  # resigning is not losing
    assert took >= 0.5  # not before the lease duration, seen from its first read


# --------------------------------------------------------------------------- the scheduler standing by


def test_a_standing_by_scheduler_keeps_wake_ups_and_runs_them_once_when_it_leads() -> None:
    async def scenario() -> tuple[list[str], list[str]]:
        runs: list[str] = []
        scheduler = Scheduler(lambda key: runs.append(key[2]), workers=2)  # type: ignore[func-returns-value]
        scheduler.pause()
        for name in ("a", "b", "a"):
            scheduler.wake(("trainingruns", "n", name))
        await asyncio.sleep(0.1)
        before = list(runs)
        scheduler.resume([("trainingruns", "n", "a"), ("modelartifacts", "n", "c")])
        assert await scheduler.idle(5)
        return before, sorted(runs)

    before, after = asyncio.run(scenario())
    assert before == []
    assert after == ["a", "b", "c"]


def test_a_scheduler_that_stops_leading_starts_no_new_pass() -> None:
    async def scenario() -> list[str]:
        runs: list[str] = []
        loop = asyncio.get_running_loop()
        gate = asyncio.Event()

        def run(key: Key) -> None:
            runs.append(key[2])
            asyncio.run_coroutine_threadsafe(gate.wait(), loop).result(5)

        scheduler = Scheduler(run, workers=1)
        scheduler.wake(("x", "n", "first"))
        scheduler.wake(("x", "n", "waiting"))  # queued behind the one slot
        while not runs:
            await asyncio.sleep(0.01)
        scheduler.pause()
        gate.set()
        assert await scheduler.drain(5)
        assert scheduler.pending == {("x", "n", "waiting")}
        return runs

    assert asyncio.run(scenario()) == ["first"]


def test_a_pass_running_too_long_is_overdue() -> None:
    async def scenario() -> tuple[list[Any], list[Any]]:
        loop = asyncio.get_running_loop()
        gate = asyncio.Event()
        scheduler = Scheduler(lambda key: asyncio.run_coroutine_threadsafe(gate.wait(), loop).result(5))
        scheduler.wake(("x", "n", "slow"))
        await asyncio.sleep(0.3)
        found = scheduler.overdue(0.2), scheduler.overdue(10)
        gate.set()
        await scheduler.drain(5)
        return found

    stuck, fine = asyncio.run(scenario())
    assert [key for key, _ in stuck] == [("x", "n", "slow")]
    assert fine == []


def test_liveness_fails_while_a_pass_is_stuck_and_otherwise_says_who_leads() -> None:
    async def scenario() -> tuple[dict[str, Any], str]:
        loop = asyncio.get_running_loop()
        gate = asyncio.Event()
        memo = kopf.Memo()
        memo.config = OperatorConfig(stuck_pass_seconds=0.2)
        memo.leader = None  # --standalone: always leads
        memo.scheduler = Scheduler(lambda key: asyncio.run_coroutine_threadsafe(gate.wait(), loop).result(5))
        healthy = await reconciliation_probe(memo=memo)
        memo.scheduler.wake(("trainingruns", "n", "stuck"))
        await asyncio.sleep(0.4)
        with pytest.raises(kopf.PermanentError) as failed:
            await reconciliation_probe(memo=memo)
        gate.set()
        await memo.scheduler.drain(5)
        return healthy, str(failed.value)

    healthy, failure = asyncio.run(scenario())
    assert healthy == {"leader": True, "identity": None, "passes": 0, "running": 0}
    assert "trainingruns/n/stuck" in failure and "over 0.2s" in failure


def test_every_known_object_is_found_in_the_cache() -> None:
    indexes: dict[str, dict[tuple[str, ...], Any]] = {
        "trainingruns": {("name", "n", "t"): [{}]},
        "modelartifacts": {("name", "n", "m"): [{}], ("ref", "n", "t"): [{}], ("owner", "uid"): [{}]},
        "inferencedeployments": {("name", "m", "i"): [{}], ("model", "m", "digits"): [{}]},
    }
    assert sorted(known_keys(Cache(indexes))) == [
        ("inferencedeployments", "m", "i"),
        ("modelartifacts", "n", "m"),
        ("trainingruns", "n", "t"),
    ]


# --------------------------------------------------------------------------- flags


def test_leader_election_flags_default_to_the_pod_and_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLIPWAY_LEADER_ELECTION_NAMESPACE", raising=False)
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    args = build_parser().parse_args([])
    assert (args.leader_election_namespace, args.lease_duration, args.lease_renew_deadline) == (
        "slipway-system",
        15.0,
        10.0,
    )
    assert (args.lease_retry_period, args.standalone) == (2.0, False)
    monkeypatch.setenv("POD_NAMESPACE", "ops")
    assert build_parser().parse_args([]).leader_election_namespace == "ops"
    assert build_parser().parse_args(["--leader-election-namespace", "x"]).leader_election_namespace == "x"


def test_inconsistent_lease_flags_are_refused_before_starting(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--lease-duration", "8"])
    assert "shorter than the lease duration" in capsys.readouterr().err


def test_the_renew_interval_of_earlier_versions_still_sets_the_deadline(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):  # duration 15 - interval 1 = deadline 14: retry 8 is over half of it
        main(["--lease-renew-interval", "1", "--lease-retry-period", "8"])
    assert "at most half the renew deadline (14s)" in capsys.readouterr().err


# --------------------------------------------------------------------------- shutdown


def shutdown(pass_seconds: float, drain_seconds: float, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A leader with one pass running is shut down (kopf's cleanup): what happened, in order."""
    from slipway import operator

    log: list[str] = []
    monkeypatch.setattr(operator, "DRAIN_SECONDS", drain_seconds)

    def exit_now(why: str) -> None:
        log.append(f"exit: {why}")
        raise SystemExit(1)  # as os._exit, it never returns

    monkeypatch.setattr(operator, "exit_now", exit_now)

    async def main() -> None:
        store = FakeStore()
        original_update = store.update

        def update(record: LeaseRecord) -> LeaseRecord:
            log.append("released" if not record.holder else "renewed")
            return original_update(record)

        store.update = update  # type: ignore[method-assign]

        def run(key: Key) -> None:
            log.append("pass starts")
            time.sleep(pass_seconds)
            log.append("pass ends")

        memo = kopf.Memo()
        memo.scheduler = Scheduler(run, workers=1)
        memo.leader = LeaderElector(store, "a", Timing(duration=1.2, renew_deadline=1.0, retry=0.1),
                                    on_lead=lambda: None, on_lost=lambda why: log.append("lost"))  # fmt: skip
        memo.fence = Fence(memo.leader, lambda why: log.append("fence"), period=0.02).start()
        memo.leader.start()
        await until(lambda: memo.leader.leading)
        memo.scheduler.wake(("trainingruns", "n", "t"))
        await until(lambda: "pass starts" in log)
        with contextlib.suppress(SystemExit):
            await operator.cleanup(memo=memo)

    asyncio.run(main())
    # From the pass's start: on a loaded machine a renewal may land between the lead and the pass.
    log = log[log.index("pass starts") :]
    return [entry for i, entry in enumerate(log) if entry != "renewed" or (i and log[i - 1] != "renewed")]


def test_on_shutdown_the_lease_is_renewed_while_passes_finish_and_released_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The pass runs past the renew deadline (1 s): the Lease is renewed meanwhile, released after it.
    events = shutdown(1.5, drain_seconds=5, monkeypatch=monkeypatch)
    assert events[:3] == ["pass starts", "renewed", "pass ends"]
    assert events[-1] == "released" and set(events[3:-1]) <= {"renewed"}


def test_a_pass_that_outlives_the_drain_ends_the_process_and_the_lease_is_not_released(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events = shutdown(1.0, drain_seconds=0.3, monkeypatch=monkeypatch)
    assert events[:2] == ["pass starts", "renewed"]
    assert events[2].startswith("exit: passes still running after 0.3s of shutdown (trainingruns/n/t)")
    assert "released" not in events


def test_resign_stops_the_loop_even_when_an_answer_lands_in_the_same_turn_as_the_cancel() -> None:
    """The renewal's answer and the shutdown's cancel arrive together: the loop still stops (a wait that
    returned the answer and dropped the cancel kept renewing forever, and shutdown never ended)."""
    store = FakeStore()
    entered, answer, answered = threading.Event(), threading.Event(), threading.Event()
    update = store.update

    def held_update(record: LeaseRecord) -> LeaseRecord:
        entered.set()
        answer.wait(5)
        try:
            return update(record)
        finally:
            answered.set()

    async def scenario(a: LeaderElector) -> int:
        await until(lambda: a.leading)
        store.update = held_update  # type: ignore[method-assign]
        await until(entered.is_set)
        answer.set()
        answered.wait(5)
        time.sleep(0.05)  # blocks the loop: the answer is queued for it, behind nothing
        await asyncio.sleep(0)  # one turn: the answer is delivered, then the cancel below
        async with asyncio.timeout(3):
            await a.resign()
        sent = len(store.calls)
        await asyncio.sleep(0.3)
        return len(store.calls) - sent

    events, after = run_elector(store, Timing(duration=1.2, renew_deadline=1.0, retry=0.05), scenario)
    assert events == ["lead"]
    assert after == 0  # no request once resigned
