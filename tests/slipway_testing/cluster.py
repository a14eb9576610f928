"""The cluster side of the tests: Slipway's CRDs installed, its objects read, written and waited on,
and the audit log's account of who wrote where."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from localkube.bootstrap import apply_crds
from localkube.kube import Kube
from localkube.wait import wait_for

ROOT = Path(__file__).resolve().parents[2]
GROUP, VERSION = "slipway.dev", "v1alpha1"


def install_crds(kube: Kube) -> list[str]:
    """Apply the CRDs of crds/ (server-side: test workers may do it at once) and wait until the API
    server serves them; then the PriorityClasses Slipway's pods use."""
    docs = [yaml.safe_load(path.read_text()) for path in sorted((ROOT / "crds").glob("slipway.dev_*.yaml"))]
    names = apply_crds(kube, docs, field_manager="slipway-tests")
    install_priority_classes(kube)
    return names


def install_priority_classes(kube: Kube) -> None:
    """manifests/priorityclasses.yaml, as `kubectl apply -k manifests/` installs it: Slipway's pods use them.
    value and preemptionPolicy are immutable: an existing one stays."""
    for body in yaml.safe_load_all((ROOT / "manifests" / "priorityclasses.yaml").read_text()):
        kube.ensure("/apis/scheduling.k8s.io/v1/priorityclasses", body)


def read_or_none(read: Callable[..., Any], *args: Any) -> Any:
    """``read(*args)`` (a Kubernetes client read), or None if the object does not exist (404)."""
    try:
        return read(*args)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def apply_object(api: client.ApiClient, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    plural = body["kind"].lower() + "s"
    return custom(api).create_namespaced_custom_object(GROUP, VERSION, namespace, plural, body)  # type: ignore[no-any-return]


def get_object(api: client.ApiClient, namespace: str, kind: str, name: str) -> dict[str, Any]:
    return custom(api).get_namespaced_custom_object(GROUP, VERSION, namespace, kind.lower() + "s", name)  # type: ignore[no-any-return]


def patch_object(api: client.ApiClient, namespace: str, kind: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
    """A merge patch of a Slipway object (as ``kubectl patch --type merge``)."""
    plural = kind.lower() + "s"
    return custom(api).patch_namespaced_custom_object(GROUP, VERSION, namespace, plural, name, body)  # type: ignore[no-any-return]


def wait_status(
    api: client.ApiClient,
    namespace: str,
    kind: str,
    name: str,
    predicate: Callable[[dict[str, Any]], bool],
    timeout: float,
    what: str,
) -> dict[str, Any]:
    """Poll the object until ``predicate`` holds; on timeout, fail showing its last status."""
    last: dict[str, Any] = {}

    def check() -> dict[str, Any] | None:
        nonlocal last
        last = get_object(api, namespace, kind, name)
        return last if predicate(last) else None

    try:
        return wait_for(check, timeout, f"{kind} {namespace}/{name}: {what}")  # type: ignore[no-any-return]
    except Exception as exc:
        raise AssertionError(f"{exc}\nlast status: {yaml.safe_dump(last.get('status'))}") from exc


def events_for(api: client.ApiClient, namespace: str, name: str) -> list[tuple[str, str]]:
    events = client.CoreV1Api(api).list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}")
    return [(e.reason, e.message) for e in events.items]


def phase_in(*phases: str) -> Callable[[dict[str, Any]], bool]:
    return lambda obj: (obj.get("status") or {}).get("phase") in phases


def report(text: str) -> None:
    """A measurement for the log (run with -s): kopf's test runner swaps sys.stdout while the operator runs."""
    sys.__stderr__.write(text + "\n")


WRITES = ("create", "update", "patch", "delete", "deletecollection")


def assert_writes_only_in(cluster: Any, user: str, since: Any, namespace: str) -> list[Any]:
    """``user`` (an operator's audited identity) wrote something since ``since``, and only in
    ``namespace`` (from the API server's audit log); returns those writes."""
    from localkube.audit import requests_by

    writes = [r for r in requests_by(cluster, user, since) if r.verb in WRITES]
    outside = [(r.verb, r.resource, r.namespace, r.name) for r in writes if r.namespace != namespace]
    assert writes and outside == [], outside
    return writes
