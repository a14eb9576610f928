"""The key of the proofs Slipway writes on what it creates in MLflow (:mod:`slipway.mlflow.proof`),
which only the operator holds: ``SLIPWAY_MLFLOW_PROOF_KEY`` when set (e.g. from a Secret through the
Deployment's ``secretKeyRef``), else the key ``key`` of the Secret ``--mlflow-proof-secret`` in the
operator's namespace, created with 32 random bytes when missing. The operator's Role there allows
``get`` on that one Secret by name and ``create`` of Secrets (which cannot be limited to a name);
it reads no other Secret. The key is never logged."""

from __future__ import annotations

import base64
import secrets
from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from slipway import kube
from slipway.mlflow import Proof
from slipway.settings import read as read_setting

KEY = "key"


def load(cluster: kube.Kube, namespace: str, secret: str, given: Callable[[str], Any] = read_setting) -> Proof:
    """The operator's proof key: the setting, else the Secret (created if missing)."""
    key = str(given("mlflow_proof_key") or "")
    if key:
        return Proof(key.encode())
    what = f"Secret {namespace}/{secret} (the MLflow proof key, --mlflow-proof-secret)"
    for _ in range(2):
        try:
            found = kube.call(f"read {what}", cluster.core.read_namespaced_secret, secret, namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
            created = _create(cluster, namespace, secret, what)
            if created is not None:
                return created
            continue  # another replica created it meanwhile: read theirs
        data = (found.data or {}).get(KEY)
        if not data:
            raise ValueError(f"{what} has no key {KEY!r}: delete it (the operator makes a new one) or add the key")
        return Proof(base64.b64decode(data))
    raise ValueError(f"{what} could neither be read nor created")


def _create(cluster: kube.Kube, namespace: str, secret: str, what: str) -> Proof | None:
    raw = secrets.token_bytes(32)
    body = client.V1Secret(
        metadata=client.V1ObjectMeta(name=secret, namespace=namespace, labels={"app.kubernetes.io/name": "slipway"}),
        type="Opaque",
        data={KEY: base64.b64encode(raw).decode()},
    )
    try:
        kube.call(f"create {what}", cluster.core.create_namespaced_secret, namespace, body)
    except kube.Conflict:
        return None
    return Proof(raw)
