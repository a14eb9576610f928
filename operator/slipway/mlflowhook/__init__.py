"""MLflow registry webhooks: an alias moved in MLflow wakes the deployments that follow it at once.

A delivery is believed only when its signature, timestamp and id say so (:mod:`.verify`, with the
ids believed kept in a Lease so that a new leader knows them, :mod:`.ledger`); anything else is
refused and changes nothing. The endpoint (:mod:`.server`) runs on a thread and an event loop of
its own, with bounds on connections, header and body time, size and rate, so that a flood of
requests never delays kopf's event loop. A believed delivery never says which version to serve: it
only marks the deployments following that model's alias stale and wakes them (on kopf's event
loop), and their pass reads the alias from MLflow itself, as a poll would. A delivery for a model
or an alias nobody follows wakes nothing, so costs no MLflow call.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from slipway import behaviour
from slipway.controller import Cache, Key, Scheduler
from slipway.metrics import WEBHOOK_DELIVERIES
from slipway.mlflowhook.ledger import LeaseLedger
from slipway.mlflowhook.server import Endpoint, Limits
from slipway.mlflowhook.verify import (
    DELIVERY,
    MAX_BODY,
    SIGNATURE,
    TIMESTAMP,
    TOLERANCE,
    Ledger,
    Refused,
    Verifier,
    sign,
)

__all__ = [
    "DELIVERY",
    "EVENTS",
    "PATH",
    "SIGNATURE",
    "TIMESTAMP",
    "TOLERANCE",
    "Endpoint",
    "LeaseLedger",
    "Limits",
    "Refused",
    "Verifier",
    "handle",
    "serve",
    "sign",
]

log = logging.getLogger(__name__)

PATH = "/mlflow/webhook"
# The events to register: an alias set (moved) or deleted. Other events are answered and ignored.
EVENTS = ("model_version_alias.created", "model_version_alias.deleted")
HANDOFF_SECONDS = 10.0  # a believed delivery waits this long for kopf's event loop to take it

Deliver = Callable[[Mapping[str, Any], Cache, Scheduler], str]


def alias_event(payload: Mapping[str, Any]) -> tuple[str, str] | None:
    """(model, alias) of an alias event (set or deleted), else None."""
    data = payload.get("data")
    if payload.get("entity") != "model_version_alias" or not isinstance(data, Mapping):
        return None
    name, alias = data.get("name"), data.get("alias")
    return (name, alias) if isinstance(name, str) and isinstance(alias, str) and name and alias else None


def followers(cache: Cache, model: str, alias: str) -> list[Key]:
    """The Slipway objects (any watched namespace) that follow ``model``'s ``alias`` (see slipway.behaviour)."""
    return behaviour.followers(cache, None, model, alias)


def deliver(payload: Mapping[str, Any], cache: Cache, scheduler: Scheduler) -> str:
    """Wake the objects a believed delivery concerns (their next pass reads the alias again);
    the outcome for the metric. Event loop only."""
    event = alias_event(payload)
    if event is None:
        return "ignored"
    keys = followers(cache, *event)
    for key in keys:
        cache.mark(key, behaviour.ALIASES)
        scheduler.wake(key)
    if keys:
        log.info(
            "MLflow webhook: alias %s of model %s %s: waking %s",
            event[1],
            event[0],
            payload.get("action"),
            ", ".join(f"{k[1]}/{k[2]}" for k in keys),
        )
    return "woke" if keys else "unfollowed"


def on_loop(loop: asyncio.AbstractEventLoop, timeout: float = HANDOFF_SECONDS) -> Deliver:
    """``deliver`` run on ``loop`` (kopf's) from another thread, waited for up to ``timeout``."""

    def run(payload: Mapping[str, Any], cache: Cache, scheduler: Scheduler) -> str:
        done: concurrent.futures.Future[str] = concurrent.futures.Future()

        def call() -> None:
            try:
                done.set_result(deliver(payload, cache, scheduler))
            except Exception as exc:  # noqa: BLE001 - handed back to the waiting thread
                done.set_exception(exc)

        loop.call_soon_threadsafe(call)
        try:
            return done.result(timeout)
        except concurrent.futures.TimeoutError:
            return "queued"  # the wake-up still happens when the loop gets to it

    return run


def handle(
    verifier: Verifier,
    cache: Cache,
    scheduler: Scheduler,
    headers: Mapping[str, str],
    body: bytes,
    now: float | None = None,
    wake: Deliver = deliver,
) -> tuple[int, str]:
    """One delivery: (HTTP status, outcome). A standby (not leading) refuses with 503 before it checks
    anything, so MLflow retries the same delivery (its retries reach another replica or the poll does)."""
    try:
        if not scheduler.active:
            raise Refused(503, "standby")
        if len(body) > MAX_BODY:
            raise Refused(413, "too-large")
        payload = verifier.verify(headers, body, time.time() if now is None else now)
        outcome = wake(payload, cache, scheduler)
        status = 202 if outcome == "queued" else 200
    except Refused as refused:
        outcome, status = refused.reason, refused.status
    WEBHOOK_DELIVERIES.labels(outcome=outcome).inc()
    return status, outcome


async def serve(
    secret: str,
    cache: Cache,
    scheduler: Scheduler,
    port: int,
    address: str,
    ledger: Ledger | None = None,
    limits: Limits | None = None,
) -> Endpoint:
    """Serve ``POST PATH`` on ``address:port`` from a thread of its own; wake-ups run on the running
    event loop (kopf's). ``ledger``: where believed ids outlive this replica (None: its memory
    alone). The endpoint, to be cleaned up on exit."""
    verifier = Verifier(secret.encode(), ledger=ledger)
    wake = on_loop(asyncio.get_running_loop())

    def handler(headers: Mapping[str, str], body: bytes) -> tuple[int, str]:
        return handle(verifier, cache, scheduler, headers, body, wake=wake)

    endpoint = Endpoint(handler, address, port, PATH, limits)
    return await asyncio.to_thread(endpoint.start)
