"""Whether a delivery is believed: MLflow's signature, a recent timestamp, an id not seen before.

MLflow 3 (SQL backends) posts each registry event to the webhooks registered with it, signed as
Standard Webhooks are (MLflow's ``mlflow/webhooks/delivery.py``): headers ``X-MLflow-Delivery-Id``
(a uuid4), ``X-MLflow-Timestamp`` (Unix seconds) and ``X-MLflow-Signature``
(``v1,<base64 HMAC-SHA256 of "<delivery id>.<timestamp>.<body>">``), body
``{"entity", "action", "timestamp", "data"}``; for ``model_version_alias.created`` the data is
``{"name", "alias", "version"}``.

A delivery is believed only when its signature verifies with the shared secret, its timestamp is
within ``TOLERANCE`` seconds of now, and its delivery id was not believed before: by this replica
(``Verifier.seen``) nor, through the :class:`Ledger` (a Lease of the operator's namespace), by any
replica before it, so a delivery captured on its way is not believed again after a failover. One
refused for its timestamp is counted, its skew set in a gauge and logged as a warning: MLflow's and
the operator's clocks apart would otherwise quietly leave alias moves to the slow lookup.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from slipway.metrics import WEBHOOK_CLOCK_SKEW

log = logging.getLogger("slipway.mlflowhook")

SIGNATURE, TIMESTAMP, DELIVERY = "X-MLflow-Signature", "X-MLflow-Timestamp", "X-MLflow-Delivery-Id"
VERSION = "v1"
TOLERANCE = 300.0  # seconds a delivery's timestamp may be off now (Standard Webhooks' default)
MAX_BODY = 64 * 1024  # an alias event is about 200 bytes
MAX_SEEN = 100_000  # delivery ids remembered within the window; more at once are refused (fail closed)
SKEW_WARNING_SECONDS = 60.0  # one warning a minute at most: stale deliveries may come in a stream


class Refused(Exception):
    """A delivery not believed: the HTTP status to answer and a short reason (the metric's outcome)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


class Ledger(Protocol):
    """Where believed delivery ids outlive the replica (:class:`slipway.mlflowhook.ledger.LeaseLedger`)."""

    def record(self, delivery: str, stamp: int, now: float) -> None:
        """Add the id, or raise :class:`Refused`: replayed (it is there), busy, or unrecorded."""


def sign(secret: bytes, delivery: str, timestamp: str, body: str) -> str:
    """The signature MLflow sends: ``v1,<base64 HMAC-SHA256 of "<delivery>.<timestamp>.<body>">``."""
    digest = hmac.new(secret, f"{delivery}.{timestamp}.{body}".encode(), hashlib.sha256).digest()
    return f"{VERSION},{base64.b64encode(digest).decode()}"


@dataclass
class Verifier:
    """Checks deliveries' signatures, timestamps and ids. One thread at a time (no lock)."""

    secret: bytes = field(repr=False)
    tolerance: float = TOLERANCE
    max_seen: int = MAX_SEEN
    ledger: Ledger | None = field(default=None, repr=False)  # None: this replica's memory alone
    seen: dict[str, float] = field(default_factory=dict, repr=False)  # delivery id -> its timestamp
    skewed: int = 0  # deliveries refused for their timestamp since the last warning
    warned_at: float | None = None

    def verify(self, headers: Mapping[str, str], body: bytes, now: float) -> dict[str, Any]:
        """The delivery's JSON body if it is believed; else raises :class:`Refused`."""
        lowered = {name.lower(): value for name, value in headers.items()}
        signatures, delivery, stamp = (lowered.get(h.lower()) for h in (SIGNATURE, DELIVERY, TIMESTAMP))
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
        if not (stamp.isascii() and stamp.isdigit()):
            raise Refused(400, "malformed")
        if abs(int(stamp) - now) > self.tolerance:
            self._stale(delivery, int(stamp) - now, now)
        if delivery in self.seen:
            raise Refused(409, "replayed")
        if len(self.seen) >= self.max_seen:
            raise Refused(429, "busy")
        if self.ledger is not None:
            self.ledger.record(delivery, int(stamp), now)
        self.seen[delivery] = float(stamp)
        try:
            payload = json.loads(text)
        except ValueError:
            raise Refused(400, "malformed") from None
        if not isinstance(payload, dict):
            raise Refused(400, "malformed")
        return payload

    def _stale(self, delivery: str, skew: float, now: float) -> None:
        """A genuinely signed delivery whose timestamp is outside the window: its skew in the gauge and
        a warning (at most one a minute, with the count since the last); then refused."""
        WEBHOOK_CLOCK_SKEW.set(skew)
        self.skewed += 1
        if self.warned_at is None or now - self.warned_at >= SKEW_WARNING_SECONDS:
            log.warning(
                "MLflow webhook: delivery %s refused as stale: its timestamp is %+.0f s from this operator's "
                "clock (tolerance %g s; %d refused so since the last warning). A steady offset means MLflow's "
                "and the operator's clocks differ: sync them (NTP); until then alias moves are seen only by the "
                "fallback lookup. A delivery hours old is a replay of a captured one.",
                delivery,
                skew,
                self.tolerance,
                self.skewed,
            )
            self.warned_at, self.skewed = now, 0
        raise Refused(401, "stale")

    def _forget_before(self, oldest: float) -> None:
        """Ids whose timestamps are out of the window: a replay of one is refused as stale anyway."""
        for delivery in [d for d, at in self.seen.items() if at < oldest]:
            del self.seen[delivery]
