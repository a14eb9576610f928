"""Count the requests one client identity makes, from the kube-apiserver's own audit log.

The launcher runs the API server with an audit policy (:func:`write_policy`) that
logs, at level ``Metadata``, only requests from users in the group
``localkube:audited``, and nothing else, so the log stays small whatever else
runs. A test gets such an identity with :func:`audited_kubeconfig`, makes its
client (or the operator) use it, and reads back what the API server saw::

    since = datetime.now(UTC)
    ...  # run the code under test with audited_kubeconfig(cluster, "operator")
    records = requests_by(cluster, "operator", since)
    assert summarize(records) == {"get configmaps": 1}

One record per request (``auditID``): its ``ResponseComplete`` event, or, for a
long-running request still open (a ``watch``), its ``ResponseStarted`` event, so
an open watch counts from the moment it starts. Watches have the verb ``watch``
(a plain ``GET`` of a collection is ``list``).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from localkube.kube import write_kubeconfig
from localkube.pki import CertificateAuthority, CertPair
from localkube.state import ClusterInfo

AUDITED_GROUP = "localkube:audited"
"""Requests of users in this group are written to the audit log; nobody else's are."""

POLICY_FILE = "audit-policy.yaml"
"""The audit policy, in the cluster directory."""

LOG_FILE = Path("logs") / "audit.log"
"""The audit log, relative to the cluster directory (one JSON event a line)."""


def policy() -> dict[str, Any]:
    """The audit policy: ``Metadata`` for :data:`AUDITED_GROUP`, ``None`` for everyone else."""
    return {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [
            {"level": "Metadata", "userGroups": [AUDITED_GROUP]},
            {"level": "None"},
        ],
    }


def write_policy(path: Path) -> Path:
    """Write :func:`policy` to ``path`` (YAML) and return ``path``."""
    path.write_text(yaml.safe_dump(policy(), sort_keys=False))
    return path


# -- identities ----------------------------------------------------------------


def _load_ca(directory: Path) -> CertificateAuthority:
    """The cluster's CA from ``ca.crt``/``ca.key``.

    ``CertificateAuthority(directory)`` always makes a *new* CA (and would
    overwrite the running cluster's), so build the object from the files instead.
    """
    pair = CertPair(directory / "ca.crt", directory / "ca.key")
    key = serialization.load_pem_private_key(pair.key.read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise TypeError(f"{pair.key} is not the EC key localkube makes")
    ca = CertificateAuthority.__new__(CertificateAuthority)
    ca.directory = directory
    ca.pair = pair
    ca._key = key
    ca._cert = x509.load_pem_x509_certificate(pair.cert.read_bytes())
    return ca


def _file_name(user: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", user).strip("-.")
    if not safe:
        raise ValueError(f"user name {user!r} has no usable character for a file name")
    return f"audited-{safe}"


def audited_kubeconfig(info: ClusterInfo, user: str, admin: bool = True) -> Path:
    """A kubeconfig for ``user`` in :data:`AUDITED_GROUP` and (``admin``) ``system:masters``.

    The client certificate (``pki/audited-<user>.crt``, CommonName ``user``) is
    issued by the cluster CA the first time; later calls return the existing
    ``kubeconfigs/audited-<user>.kubeconfig``. Every request made with it is
    audited: read them with :func:`requests_by`. Without ``admin`` the user may do
    only what RoleBindings grant it (e.g. ``edit`` in one namespace: a tenant).
    """
    name = _file_name(user)
    path = info.directory / "kubeconfigs" / f"{name}.kubeconfig"
    if path.exists():
        return path
    groups = ("system:masters", AUDITED_GROUP) if admin else (AUDITED_GROUP,)
    pair = _load_ca(info.pki).issue(name, user, groups)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    write_kubeconfig(tmp, info.apiserver_url, info.pki / "ca.crt", pair.cert, pair.key, user=user)
    tmp.replace(path)  # present means complete
    return path


# -- the log -------------------------------------------------------------------


@dataclass(frozen=True)
class AuditRecord:
    """One request as the API server audited it."""

    verb: str
    """``get``, ``list``, ``watch``, ``create``, ``update``, ``patch``, ``delete``, ...
    (for a non-resource URL, the HTTP method in lower case)"""
    resource: str | None
    """``pods``, ``configmaps``, ``trainingruns``...; None for a non-resource URL such as ``/api``"""
    subresource: str | None
    namespace: str | None
    name: str | None
    code: int
    """HTTP status code (0 if the event had none)"""
    time: datetime
    """``requestReceivedTimestamp`` (time-zone aware, UTC)"""
    uri: str

    @property
    def key(self) -> str:
        """``"verb resource[/subresource]"``, or ``"verb /path"`` for a non-resource URL."""
        if self.resource is None:
            return f"{self.verb} {self.uri.split('?', 1)[0]}"
        return f"{self.verb} {self.resource}/{self.subresource}" if self.subresource else f"{self.verb} {self.resource}"


def audit_log(info: ClusterInfo) -> Path:
    """The cluster's audit log; ``FileNotFoundError`` if it was started without one."""
    if info.audit_log is None:
        raise FileNotFoundError(
            f"the cluster in {info.directory} has no audit log (started by an older localkube): restart it"
        )
    return info.audit_log


def _log_files(path: Path) -> list[Path]:
    """Rotated backups (``audit-<timestamp>.log``, oldest first), then the current log."""
    backups = sorted(path.parent.glob(f"{path.stem}-*{path.suffix}"))
    return [*backups, path]


def _events(path: Path) -> Iterator[dict[str, Any]]:
    for file in _log_files(path):
        try:
            text = file.read_text()
        except FileNotFoundError:  # rotated away while we looked
            continue
        for line in text.splitlines():
            try:
                event = json.loads(line)
            except ValueError:  # a line still being written
                continue
            if isinstance(event, dict):
                yield event


def _aware(t: datetime) -> datetime:
    """``t`` with a time zone; a naive ``t`` is local time (as ``datetime.now()`` gives)."""
    return t if t.tzinfo is not None else t.astimezone()


def _record(event: dict[str, Any]) -> AuditRecord:
    ref = event.get("objectRef") or {}
    return AuditRecord(
        verb=event.get("verb", ""),
        resource=ref.get("resource"),
        subresource=ref.get("subresource"),
        namespace=ref.get("namespace"),
        name=ref.get("name"),
        code=int((event.get("responseStatus") or {}).get("code") or 0),
        time=datetime.fromisoformat(event["requestReceivedTimestamp"]),
        uri=event.get("requestURI", ""),
    )


def requests_by(info: ClusterInfo, user: str, since: datetime, until: datetime | None = None) -> list[AuditRecord]:
    """The requests ``user`` made that the API server received in ``[since, until)``, oldest first.

    ``user`` must be in :data:`AUDITED_GROUP` (see :func:`audited_kubeconfig`):
    nobody else's requests are logged. Reads the audit log and its rotated
    backup; a request shows up once its response is complete (an open watch once
    it starts), usually within milliseconds, so wait for what you expect with
    :func:`localkube.wait.wait_for`.
    """
    start = _aware(since)
    end = _aware(until) if until is not None else None
    found: dict[str, AuditRecord] = {}
    for event in _events(audit_log(info)):
        stage = event.get("stage")
        if stage not in ("ResponseComplete", "ResponseStarted"):
            continue
        if (event.get("user") or {}).get("username") != user:
            continue
        audit_id = event.get("auditID", "")
        if stage == "ResponseStarted" and audit_id in found:
            continue  # the request's ResponseComplete is already in
        record = _record(event)
        if record.time < start or (end is not None and record.time >= end):
            continue
        found[audit_id] = record
    return sorted(found.values(), key=lambda r: r.time)


def summarize(records: Iterable[AuditRecord]) -> dict[str, int]:
    """How many requests per ``"verb resource[/subresource]"`` (see :attr:`AuditRecord.key`), sorted by key."""
    return dict(sorted(Counter(r.key for r in records).items()))
