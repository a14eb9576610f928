"""The Lease that elects the leader (``coordination.k8s.io/v1``, as client-go's ``leaderelection``
writes it): what it says, the pure decisions over it (``decide``, ``claim``, ``released``), and
its reads and writes through the blocking Kubernetes client (``LeaseStore``). Every write carries
the ``resourceVersion`` it read, so of two replicas that try at once the API server lets exactly
one win; the other gets 409 Conflict (:class:`LeaseConflict`). The loop that uses it is
:mod:`slipway.leader`.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

LEASE_NAME = "slipway-operator"
LABELS = {"app.kubernetes.io/name": "slipway", "app.kubernetes.io/component": "operator"}


@dataclass(frozen=True)
class LeaseRecord:
    """What a Lease says, and the resourceVersion it was read at ("" before it exists)."""

    holder: str = ""
    duration: float = 15.0
    acquired: datetime | None = None
    renewed: datetime | None = None
    transitions: int = 0
    version: str = ""


class Decision(enum.Enum):
    CREATE = "create"  # no Lease yet: create it, held by this replica
    ACQUIRE = "acquire"  # released or expired: take it over
    RENEW = "renew"  # held by this replica: renew it
    STANDBY = "standby"  # held by another replica, which renewed it recently


def decide(record: LeaseRecord | None, me: str, observed_for: float) -> Decision:
    """What to do about the Lease ``record``, unchanged for ``observed_for`` seconds by this replica's clock."""
    if record is None:
        return Decision.CREATE
    if record.holder == me:
        return Decision.RENEW
    if not record.holder or observed_for >= record.duration:
        return Decision.ACQUIRE
    return Decision.STANDBY


def claim(record: LeaseRecord | None, me: str, now: datetime, duration: float) -> LeaseRecord:
    """The Lease as this replica writes it to create, acquire or renew it (same resourceVersion: the
    API server refuses the write if anyone wrote in between)."""
    if record is not None and record.holder == me:
        return dataclasses.replace(record, duration=duration, renewed=now)
    transitions = record.transitions + 1 if record is not None else 0
    version = record.version if record is not None else ""
    return LeaseRecord(me, duration, acquired=now, renewed=now, transitions=transitions, version=version)


def released(record: LeaseRecord, now: datetime) -> LeaseRecord:
    """The Lease given up on shutdown: no holder, so that a standby takes it at its next read."""
    return dataclasses.replace(record, holder="", duration=1.0, renewed=now)


class Observation:
    """When this replica last saw the Lease change, by its own monotonic clock."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.record: LeaseRecord | None = None
        self.since = clock()

    def see(self, record: LeaseRecord | None) -> None:
        if record != self.record:
            self.record = record
            self.since = self.clock()

    def age(self) -> float:
        return self.clock() - self.since


class LeaseConflict(Exception):
    """409: another replica wrote the Lease first (or created it)."""


class LeaseStore:
    """Read, create and replace one Lease through the (blocking) Kubernetes client."""

    def __init__(self, api: client.ApiClient, namespace: str, name: str = LEASE_NAME, timeout: float = 5.0) -> None:
        self.coordination = client.CoordinationV1Api(api)
        self.namespace = namespace
        self.name = name
        self.timeout = timeout

    def get(self) -> LeaseRecord | None:
        try:
            lease = self.coordination.read_namespaced_lease(self.name, self.namespace, _request_timeout=self.timeout)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return _record(lease)

    def create(self, record: LeaseRecord) -> LeaseRecord:
        try:
            lease = self.coordination.create_namespaced_lease(
                self.namespace, self._body(record), _request_timeout=self.timeout
            )
        except ApiException as exc:
            if exc.status == 409:
                raise LeaseConflict(f"Lease {self.namespace}/{self.name} was created by another replica") from exc
            raise
        return _record(lease)

    def update(self, record: LeaseRecord) -> LeaseRecord:
        try:
            lease = self.coordination.replace_namespaced_lease(
                self.name, self.namespace, self._body(record), _request_timeout=self.timeout
            )
        except ApiException as exc:
            if exc.status in (404, 409):
                raise LeaseConflict(f"Lease {self.namespace}/{self.name} changed since it was read") from exc
            raise
        return _record(lease)

    def _body(self, record: LeaseRecord) -> client.V1Lease:
        return client.V1Lease(
            metadata=client.V1ObjectMeta(
                name=self.name, namespace=self.namespace, labels=LABELS, resource_version=record.version or None
            ),
            spec=client.V1LeaseSpec(
                holder_identity=record.holder,
                lease_duration_seconds=max(1, round(record.duration)),
                acquire_time=record.acquired,
                renew_time=record.renewed,
                lease_transitions=record.transitions,
            ),
        )


def _record(lease: Any) -> LeaseRecord:
    spec = lease.spec
    return LeaseRecord(
        holder=spec.holder_identity or "",
        duration=float(spec.lease_duration_seconds or LeaseRecord.duration),
        acquired=spec.acquire_time,
        renewed=spec.renew_time,
        transitions=spec.lease_transitions or 0,
        version=lease.metadata.resource_version or "",
    )
