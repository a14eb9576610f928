"""The MLflow webhook's guards (slipway.mlflowhook): a delivery is believed only when MLflow's own
signature verifies, its timestamp is recent and its delivery id is new; a believed one wakes only the
deployments that follow that model's alias. Signatures are made by MLflow's own code (its delivery
module, the release the tests pin), so the format is MLflow's, not a copy of it."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest

from localkube.wait import wait_for
from slipway.behaviour import ALIASES
from slipway.controller import Cache
from slipway.inference import register  # noqa: F401 - the kind whose objects follow aliases
from slipway.mlflowhook import DELIVERY, SIGNATURE, TIMESTAMP, TOLERANCE, Refused, Verifier, handle

delivery = pytest.importorskip("mlflow.webhooks.delivery")

SECRET = "s3cret-for-tests"
NOW = 1_800_000_000.0


def signed(data: dict[str, Any], *, at: float = NOW, secret: str = SECRET, delivery_id: str | None = None,
           entity: str = "model_version_alias", action: str = "created") -> tuple[dict[str, str], bytes]:  # fmt: skip
    """Headers and body as MLflow sends them (json.dumps of the envelope, signed by MLflow's function)."""
    body = json.dumps({"entity": entity, "action": action, "timestamp": "2027-01-15T08:00:00+00:00", "data": data})
    delivery_id = delivery_id or str(uuid.uuid4())
    stamp = str(int(at))
    headers = {
        "Content-Type": "application/json",
        DELIVERY: delivery_id,
        TIMESTAMP: stamp,
        SIGNATURE: delivery._generate_hmac_signature(secret, delivery_id, stamp, body),
    }
    return headers, body.encode()


MOVE = {"name": "digits", "alias": "candidate", "version": "7"}


def test_a_delivery_mlflow_signed_is_believed():
    headers, body = signed(MOVE)
    assert Verifier(SECRET.encode()).verify(headers, body, NOW)["data"] == MOVE


@pytest.mark.parametrize(
    "tamper",
    [
        lambda h, b: ({**h, SIGNATURE: signed(MOVE, secret="another secret")[0][SIGNATURE]}, b),
        lambda h, b: (h, b.replace(b'"7"', b'"8"')),  # the version changed in flight
        lambda h, b: ({**h, TIMESTAMP: str(int(NOW) + 1)}, b),  # a fresher timestamp on an old signature
        lambda h, b: ({**h, DELIVERY: str(uuid.uuid4())}, b),  # a new id on an old signature
        lambda h, b: ({**h, SIGNATURE: "v1," + h[SIGNATURE][3:][::-1]}, b),
        lambda h, b: ({**h, SIGNATURE: h[SIGNATURE].replace("v1,", "v0,")}, b),
    ],
    ids=["other-secret", "body", "timestamp", "delivery-id", "garbled", "version"],
)
def test_a_wrong_signature_is_refused(tamper):
    headers, body = tamper(*signed(MOVE))
    with pytest.raises(Refused) as refused:
        Verifier(SECRET.encode()).verify(headers, body, NOW)
    assert (refused.value.status, refused.value.reason) == (401, "bad-signature")


@pytest.mark.parametrize("missing", [SIGNATURE, TIMESTAMP, DELIVERY])
def test_an_unsigned_delivery_is_refused(missing):
    headers, body = signed(MOVE)
    del headers[missing]
    with pytest.raises(Refused, match="unsigned"):
        Verifier(SECRET.encode()).verify(headers, body, NOW)


@pytest.mark.parametrize("offset", [-TOLERANCE - 1, TOLERANCE + 1, -86400])
def test_a_delivery_signed_outside_the_window_is_refused(offset):
    headers, body = signed(MOVE, at=NOW + offset)
    with pytest.raises(Refused) as refused:
        Verifier(SECRET.encode()).verify(headers, body, NOW)
    assert (refused.value.status, refused.value.reason) == (401, "stale")


def test_a_delivery_at_the_edge_of_the_window_is_believed():
    verifier = Verifier(SECRET.encode())
    for offset in (-TOLERANCE, TOLERANCE):
        verifier.verify(*signed(MOVE, at=NOW + offset), NOW)


def test_a_replayed_delivery_is_refused_within_the_window_and_as_stale_after_it():
    verifier = Verifier(SECRET.encode())
    headers, body = signed(MOVE)
    verifier.verify(headers, body, NOW)
    for later in (0, 1, TOLERANCE):
        with pytest.raises(Refused) as refused:
            verifier.verify(headers, body, NOW + later)
        assert (refused.value.status, refused.value.reason) == (409, "replayed")
    # Past the window its id is forgotten (memory stays bounded) and its timestamp refuses it.
    with pytest.raises(Refused, match="stale"):
        verifier.verify(headers, body, NOW + TOLERANCE + 1)
    assert verifier.seen == {}


def test_a_refused_delivery_is_not_remembered_and_the_memory_is_bounded():
    verifier = Verifier(SECRET.encode(), max_seen=2)
    forged = signed(MOVE, secret="wrong")
    with pytest.raises(Refused):
        verifier.verify(*forged, NOW)
    assert verifier.seen == {}
    verifier.verify(*signed(MOVE), NOW)
    verifier.verify(*signed(MOVE), NOW)
    with pytest.raises(Refused) as refused:  # fail closed: never forget an id inside the window
        verifier.verify(*signed(MOVE), NOW)
    assert refused.value.status == 429


def test_a_delivery_refused_for_its_timestamp_is_counted_and_warned_of_with_its_skew(caplog):
    from slipway.metrics import WEBHOOK_CLOCK_SKEW, WEBHOOK_DELIVERIES

    stale = WEBHOOK_DELIVERIES.labels(outcome="stale")
    before = stale._value.get()
    verifier, scheduler, cache = Verifier(SECRET.encode()), FakeScheduler(), cache_of(*FOLLOWERS)
    with caplog.at_level("WARNING", logger="slipway.mlflowhook"):
        # MLflow's clock 7 minutes ahead: three deliveries a few seconds apart, one warning.
        for n in range(3):
            assert handle(verifier, cache, scheduler, *signed(MOVE, at=NOW + 420), now=NOW + n) == (401, "stale")
        assert WEBHOOK_CLOCK_SKEW._value.get() == 418
        # A minute on, the next one warns again, with how many were refused since.
        handle(verifier, cache, scheduler, *signed(MOVE, at=NOW - 400), now=NOW + 61)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 2 and "+420 s" in warnings[0] and "-461 s" in warnings[1], warnings
    assert "3 refused so since the last warning" in warnings[1] and "sync them (NTP)" in warnings[0]
    assert stale._value.get() == before + 4 and WEBHOOK_CLOCK_SKEW._value.get() == -461
    assert scheduler.woken == []


class Ledger:
    """The ids other replicas believed (the Lease's annotation, in memory): record refuses one it holds."""

    def __init__(self, *held: str, failing: bool = False) -> None:
        self.ids, self.failing = set(held), failing

    def record(self, delivery: str, stamp: int, now: float) -> None:
        if self.failing:
            raise Refused(503, "unrecorded")
        if delivery in self.ids:
            raise Refused(409, "replayed")
        self.ids.add(delivery)


def test_an_id_another_replica_believed_is_refused_and_one_unrecorded_can_come_again():
    headers, body = signed(MOVE)
    elsewhere = Verifier(SECRET.encode(), ledger=Ledger(headers[DELIVERY]))
    with pytest.raises(Refused) as refused:
        elsewhere.verify(headers, body, NOW)
    assert (refused.value.status, refused.value.reason) == (409, "replayed")
    ledger = Ledger(failing=True)
    verifier = Verifier(SECRET.encode(), ledger=ledger)
    with pytest.raises(Refused, match="unrecorded"):  # the API server did not take it: MLflow retries it
        verifier.verify(headers, body, NOW)
    assert verifier.seen == {}
    ledger.failing = False
    assert verifier.verify(headers, body, NOW + 2)["data"] == MOVE and ledger.ids == {headers[DELIVERY]}


def test_a_forged_or_stale_delivery_never_reaches_the_ledger():
    ledger = Ledger(failing=True)  # any call would raise "unrecorded"
    verifier = Verifier(SECRET.encode(), ledger=ledger)
    for make, reason in [(lambda: signed(MOVE, secret="wrong"), "bad-signature"),
                         (lambda: signed(MOVE, at=NOW - 3600), "stale")]:  # fmt: skip
        with pytest.raises(Refused, match=reason):
            verifier.verify(*make(), NOW)


def test_the_secret_is_in_no_repr():
    assert SECRET not in repr(Verifier(SECRET.encode()))


class FakeScheduler:
    def __init__(self, active: bool = True) -> None:
        self.active, self.woken = active, []

    def wake(self, key, delay: float = 0.0) -> None:
        self.woken.append(key)


def idep(namespace: str, name: str, model: str, alias: str) -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name, "uid": f"{namespace}-{name}"},
            "spec": {"model": {"name": model, "alias": alias}}}  # fmt: skip


def cache_of(*objs: dict[str, Any]) -> Cache:
    index: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for o in objs:
        meta = o["metadata"]
        index.setdefault(("name", meta["namespace"], meta["name"]), []).append(o)
        index.setdefault(("model", meta["namespace"], o["spec"]["model"]["name"]), []).append(o)
    return Cache({"inferencedeployments": index})


FOLLOWERS = (
    idep("acme", "a", "digits", "candidate"),
    idep("t2", "b", "digits", "candidate"),
    idep("acme", "c", "digits", "production"),
    idep("acme", "d", "other", "candidate"),
)


def test_a_believed_move_wakes_exactly_the_deployments_following_that_alias():
    cache, scheduler = cache_of(*FOLLOWERS), FakeScheduler()
    status, outcome = handle(Verifier(SECRET.encode()), cache, scheduler, *signed(MOVE), now=NOW)
    woken = {("inferencedeployments", "acme", "a"), ("inferencedeployments", "t2", "b")}
    assert (status, outcome) == (200, "woke") and set(scheduler.woken) == woken
    assert cache.marks == {(key, ALIASES) for key in woken}


@pytest.mark.parametrize(
    ("data", "event", "expected"),
    [
        ({"name": "nobody-follows", "alias": "candidate", "version": "1"}, {}, "unfollowed"),
        ({"name": "digits", "alias": "staging", "version": "1"}, {}, "unfollowed"),
        ({"name": "digits", "version": "1", "source": "runs:/x/model"}, {"entity": "model_version"}, "ignored"),
    ],
)
def test_a_delivery_for_what_nobody_follows_wakes_nothing(data, event, expected):
    cache, scheduler = cache_of(*FOLLOWERS), FakeScheduler()
    assert handle(Verifier(SECRET.encode()), cache, scheduler, *signed(data, **event), now=NOW) == (200, expected)
    assert scheduler.woken == [] and cache.marks == set()


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda: signed(MOVE, secret="wrong"), (401, "bad-signature")),
        (lambda: signed(MOVE, at=NOW - 3600), (401, "stale")),
        (lambda: ({}, b"{}"), (401, "unsigned")),
        (lambda: (signed(MOVE)[0], b"x" * 70_000), (413, "too-large")),
    ],
)
def test_a_refused_delivery_wakes_nothing(make, expected):
    cache, scheduler = cache_of(*FOLLOWERS), FakeScheduler()
    assert handle(Verifier(SECRET.encode()), cache, scheduler, *make(), now=NOW) == expected
    assert scheduler.woken == [] and cache.marks == set()


def test_a_standby_refuses_so_that_mlflow_retries_and_keeps_the_id_unspent():
    cache, verifier = cache_of(*FOLLOWERS), Verifier(SECRET.encode())
    headers, body = signed(MOVE)
    assert handle(verifier, cache, FakeScheduler(active=False), headers, body, now=NOW) == (503, "standby")
    leader = FakeScheduler()
    assert handle(verifier, cache, leader, headers, body, now=NOW + 2) == (200, "woke") and leader.woken


def test_a_wake_up_runs_on_the_operators_event_loop_and_a_blocked_loop_answers_queued():
    import asyncio
    import threading

    from slipway.mlflowhook import on_loop

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        cache, scheduler = cache_of(*FOLLOWERS), FakeScheduler()
        woke_on: list[Any] = []
        scheduler.wake = lambda key, delay=0.0: woke_on.append(threading.current_thread())  # type: ignore[method-assign]
        wake = on_loop(loop, timeout=5)
        assert handle(Verifier(SECRET.encode()), cache, scheduler, *signed(MOVE), now=NOW, wake=wake) == (200, "woke")
        assert woke_on == [thread, thread]
        released = threading.Event()
        loop.call_soon_threadsafe(released.wait, 10)  # the loop blocked (a handler that blocks it)
        late = on_loop(loop, timeout=0.2)
        assert handle(Verifier(SECRET.encode()), cache, scheduler, *signed(MOVE), now=NOW, wake=late) == (202, "queued")
        released.set()
        wait_for(lambda: len(woke_on) == 4, 10, "the queued wake-ups")
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


async def test_with_a_secret_the_operator_serves_the_webhook_and_looks_aliases_up_only_as_its_fallback(
    monkeypatch, caplog
):
    import logging

    import aiohttp
    import kopf

    from slipway.config import OperatorConfig
    from slipway.controller import Scheduler
    from slipway.operator import serve_mlflow_webhook
    from slipway_testing import free_port

    port = free_port()
    config = OperatorConfig(metrics_address="127.0.0.1", mlflow_webhook_port=port)
    woken: list[Any] = []
    memo = kopf.Memo(config=config, cache=cache_of(*FOLLOWERS), scheduler=Scheduler(woken.append))
    monkeypatch.delenv("SLIPWAY_MLFLOW_WEBHOOK_SECRET", raising=False)
    await serve_mlflow_webhook(memo, config, logging.getLogger("test"))
    assert memo.webhook is None and memo.config.alias_poll_seconds == config.alias_poll_seconds

    monkeypatch.setenv("SLIPWAY_MLFLOW_WEBHOOK_SECRET", SECRET)
    with caplog.at_level(logging.DEBUG):
        await serve_mlflow_webhook(memo, config, logging.getLogger("test"))
    try:
        assert memo.config.alias_poll_seconds == config.alias_webhook_poll_seconds == 300
        url = f"http://127.0.0.1:{port}/mlflow/webhook"
        async with aiohttp.ClientSession() as http:
            async with http.post(url, data=b"{}", headers={"X-MLflow-Delivery-Id": "x"}) as answer:
                assert answer.status == 401
            headers, body = signed(MOVE, at=time.time())
            async with http.post(url, data=body, headers=headers) as answer:
                assert answer.status == 200 and await answer.text() == "woke\n"
        assert SECRET not in caplog.text
    finally:
        await memo.webhook.cleanup()
