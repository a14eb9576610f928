"""MLflow registry webhooks: an alias moved in MLflow wakes the deployments that follow it at once.

MLflow 3 (SQL backends) posts each registry event to the webhooks registered with it, signed as
Standard Webhooks are (MLflow's ``mlflow/webhooks/delivery.py``): headers ``X-MLflow-Delivery-Id``
(a uuid4), ``X-MLflow-Timestamp`` (Unix seconds) and ``X-MLflow-Signature``
(``v1,<base64 HMAC-SHA256 of "<delivery id>.<timestamp>.<body>">``), body
``{"entity", "action", "timestamp", "data"}``; for ``model_version_alias.created`` the data is
``{"name", "alias", "version"}``.

A delivery is believed only when its signature verifies with the shared secret, its timestamp is
within ``TOLERANCE`` seconds of now, and its delivery id was not seen within that window (a replay):
anything else is refused before it is read, and changes nothing. A believed delivery never says which
version to serve: it only marks the deployments following that model's alias stale and wakes them, and
their pass reads the alias from MLflow itself, as a poll would. A delivery for a model or an alias
nobody follows wakes nothing, so costs no MLflow call.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from slipway.controller import Cache, Key, Scheduler
from slipway.metrics import WEBHOOK_DELIVERIES

log = logging.getLogger(__name__)

SIGNATURE, TIMESTAMP, DELIVERY = "X-MLflow-Signature", "X-MLflow-Timestamp", "X-MLflow-Delivery-Id"
VERSION = "v1"
TOLERANCE = 300.0  # seconds a delivery's timestamp may be off now (Standard Webhooks' default)
MAX_BODY = 64 * 1024  # an alias event is about 200 bytes
MAX_SEEN = 100_000  # delivery ids remembered within the window; more at once are refused (fail closed)
PATH = "/mlflow/webhook"
# The events to register: an alias set (moved) or deleted. Other events are answered and ignored.
EVENTS = ("model_version_alias.created", "model_version_alias.deleted")
INDEX = "inferencedeployments"


class Refused(Exception):
    """A delivery not believed: the HTTP status to answer and a short reason (the metric's outcome)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


def sign(secret: bytes, delivery: str, timestamp: str, body: str) -> str:
    """The signature MLflow sends: ``v1,<base64 HMAC-SHA256 of "<delivery>.<timestamp>.<body>">``."""
    digest = hmac.new(secret, f"{delivery}.{timestamp}.{body}".encode(), hashlib.sha256).digest()
    return f"{VERSION},{base64.b64encode(digest).decode()}"


@dataclass
class Verifier:
    """Checks deliveries' signatures, timestamps and ids. Event loop only (no lock)."""

    secret: bytes = field(repr=False)
    tolerance: float = TOLERANCE
    max_seen: int = MAX_SEEN
    seen: dict[str, float] = field(default_factory=dict, repr=False)  # delivery id -> its timestamp

    def verify(self, headers: Mapping[str, str], body: bytes, now: float) -> dict[str, Any]:
        """The delivery's JSON body if it is believed; else raises :class:`Refused`."""
        signatures, delivery, stamp = headers.get(SIGNATURE), headers.get(DELIVERY), headers.get(TIMESTAMP)
        if not signatures or not delivery or not stamp:
            raise Refused(401, "unsigned")
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            raise Refused(400, "malformed") from None
        expected = sign(self.secret, delivery, stamp, text)
        # Standard Webhooks: space-separated signatures, any one of which may match (a secret rotating).
        if not any(hmac.compare_digest(expected.encode(), s.encode()) for s in signatures.split()):
            raise Refused(401, "bad-signature")
        self._forget_before(now - self.tolerance)
        if not stamp.isdigit() or abs(now - int(stamp)) > self.tolerance:
            raise Refused(401, "stale")
        if delivery in self.seen:
            raise Refused(409, "replayed")
        if len(self.seen) >= self.max_seen:
            raise Refused(429, "busy")
        self.seen[delivery] = float(stamp)
        try:
            payload = json.loads(text)
        except ValueError:
            raise Refused(400, "malformed") from None
        if not isinstance(payload, dict):
            raise Refused(400, "malformed")
        return payload

    def _forget_before(self, oldest: float) -> None:
        """Ids whose timestamps are out of the window: a replay of one is refused as stale anyway."""
        for delivery in [d for d, at in self.seen.items() if at < oldest]:
            del self.seen[delivery]


def alias_event(payload: Mapping[str, Any]) -> tuple[str, str] | None:
    """(model, alias) of an alias event (set or deleted), else None."""
    data = payload.get("data")
    if payload.get("entity") != "model_version_alias" or not isinstance(data, Mapping):
        return None
    name, alias = data.get("name"), data.get("alias")
    return (name, alias) if isinstance(name, str) and isinstance(alias, str) and name and alias else None


def followers(cache: Cache, model: str, alias: str) -> list[Key]:
    """The InferenceDeployments (any watched namespace) whose spec.model follows ``model``'s ``alias``."""
    found: list[Key] = []
    for key in [k for k in list(cache.indexes[INDEX]) if len(k) == 3 and k[0] == "model" and k[2] == model]:
        for obj in cache.select(INDEX, *key):
            spec_model = (obj.get("spec") or {}).get("model") or {}
            if spec_model.get("name") == model and spec_model.get("alias") == alias:
                found.append((INDEX, key[1], obj["metadata"]["name"]))
    return found


def deliver(payload: Mapping[str, Any], cache: Cache, scheduler: Scheduler) -> str:
    """Wake the deployments a believed delivery concerns (their next pass reads the alias again);
    the outcome for the metric. Event loop only."""
    event = alias_event(payload)
    if event is None:
        return "ignored"
    keys = followers(cache, *event)
    for key in keys:
        cache.alias_stale.add(key)
        scheduler.wake(key)
    if keys:
        log.info("MLflow webhook: alias %s of model %s %s: waking %s", event[1], event[0], payload.get("action"),
                 ", ".join(f"{k[1]}/{k[2]}" for k in keys))  # fmt: skip
    return "woke" if keys else "unfollowed"


def handle(verifier: Verifier, cache: Cache, scheduler: Scheduler, headers: Mapping[str, str], body: bytes,
           now: float | None = None) -> tuple[int, str]:  # fmt: skip
    """One delivery: (HTTP status, outcome). A standby (not leading) refuses with 503 before it checks
    anything, so MLflow retries the same delivery (its retries reach another replica or the poll does)."""
    try:
        if not scheduler.active:
            raise Refused(503, "standby")
        if len(body) > MAX_BODY:
            raise Refused(413, "too-large")
        payload = verifier.verify(headers, body, time.time() if now is None else now)
        outcome, status = deliver(payload, cache, scheduler), 200
    except Refused as refused:
        outcome, status = refused.reason, refused.status
    WEBHOOK_DELIVERIES.labels(outcome=outcome).inc()
    return status, outcome


async def serve(secret: str, cache: Cache, scheduler: Scheduler, port: int, address: str) -> Any:
    """Serve ``POST PATH`` on ``address:port`` on the running event loop (kopf's); the aiohttp runner,
    to be cleaned up on exit."""
    from aiohttp import web

    verifier = Verifier(secret.encode())

    async def receive(request: web.Request) -> web.Response:
        body = await request.content.read(MAX_BODY + 1)
        status, outcome = handle(verifier, cache, scheduler, request.headers, body)
        response = web.Response(status=status, text=outcome + "\n")
        if outcome == "standby":  # MLflow retries a 503 on a new connection: the Service may pick the leader
            response.force_close()
        return response

    app = web.Application(client_max_size=MAX_BODY + 1)
    app.router.add_post(PATH, receive)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, address, port).start()
    return runner
