"""Leader election: the pure decisions on a Lease, two electors racing on one (fake) Lease with a
resourceVersion, the loop's transitions, and the scheduler standing by while another replica leads."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import kopf
import pytest

from slipway.__main__ import build_parser, main
from slipway.config import OperatorConfig
from slipway.controller import Cache, Key, Scheduler
from slipway.leader import (
    Decision,
    LeaderElector,
    LeaseConflict,
    LeaseRecord,
    Timing,
    claim,
    decide,
    released,
)
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
    ("duration", "renew", "retry"),
    [(15, 8, 2), (15, 5, 10), (0, 5, 2), (15, 5, -1)],
)
def test_timings_that_would_let_two_replicas_lead_are_refused(duration: float, renew: float, retry: float) -> None:
    with pytest.raises(ValueError):
        Timing(duration, renew, retry)


def test_the_renew_deadline_leaves_a_renew_interval_before_expiry() -> None:
    assert Timing().renew_deadline == 10.0


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
        on_standby=lambda: log.append(f"{identity} stands by"),
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


def test_the_loop_leads_renews_and_stops_leading_when_it_cannot_renew_before_the_deadline() -> None:
    async def scenario() -> tuple[list[str], int, float]:
        loop = asyncio.get_running_loop()
        store, events = FakeStore(), []
        timing = Timing(duration=1.2, renew=0.2, retry=0.1)
        since_renewal: list[float] = []

        def stand_by() -> None:
            events.append("standby")
            since_renewal.append(loop.time() - a.renewed_at)

        a = LeaderElector(store, "a", timing, on_lead=lambda: events.append("lead"), on_standby=stand_by,
                          clock=loop.time)  # fmt: skip
        a.start()
        await asyncio.sleep(0.7)
        updates = store.calls.count("update")
        store.down = True
        deadline = loop.time() + 5
        while a.leading and loop.time() < deadline:
            await asyncio.sleep(0.01)
        await a.resign()
        return events, updates, since_renewal[0]

    events, updates, since_renewal = asyncio.run(scenario())
    assert events == ["lead", "standby"]
    assert updates >= 2  # renewed every 0.2 s
    # It stops at the renew deadline (1.0 s after its last renewal), before the Lease expires (1.2 s).
    assert 1.0 <= since_renewal < 1.2


def test_the_loop_stands_by_while_another_replica_holds_the_lease_then_takes_it_over() -> None:
    async def scenario() -> tuple[list[str], float]:
        loop = asyncio.get_running_loop()
        store, events = FakeStore(), []
        store.lease = LeaseRecord("other", 0.5, T0, T0, 0, "1")
        b = LeaderElector(store, "b", Timing(duration=0.5, renew=0.1, retry=0.05),
                          on_lead=lambda: events.append("lead"), on_standby=lambda: events.append("standby"),
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
    assert events == ["leading=False", "lead", "standby", "holder=''"]
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
    assert (args.leader_election_namespace, args.lease_duration, args.lease_renew_interval) == (
        "slipway-system",
        15.0,
        5.0,
    )
    assert (args.lease_retry_period, args.standalone) == (2.0, False)
    monkeypatch.setenv("POD_NAMESPACE", "ops")
    assert build_parser().parse_args([]).leader_election_namespace == "ops"
    assert build_parser().parse_args(["--leader-election-namespace", "x"]).leader_election_namespace == "x"


def test_inconsistent_lease_flags_are_refused_before_starting(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--lease-duration", "8"])
    assert "less than half the lease duration" in capsys.readouterr().err
