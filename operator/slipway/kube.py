"""The Kubernetes API, through the official (blocking) client.

Handlers are sync, so kopf runs them in its thread pool and these calls never
block the event loop. API errors become kopf's error vocabulary: what a retry
can fix is a TemporaryError with a delay, what it cannot is a PermanentError.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import kopf
import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from slipway import GROUP, VERSION

T = TypeVar("T")

RETRYABLE_STATUSES = {409, 429, 500, 502, 503, 504}


@dataclass
class Kube:
    """API clients of the groups the operator uses, sharing one connection pool."""

    api: client.ApiClient
    core: client.CoreV1Api
    apps: client.AppsV1Api
    batch: client.BatchV1Api
    autoscaling: client.AutoscalingV2Api
    custom: client.CustomObjectsApi

    @classmethod
    def connect(cls, kubeconfig: str | None = None) -> Kube:
        """In-cluster config inside a pod, else the kubeconfig (KUBECONFIG or ~/.kube/config)."""
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config()
            api = client.ApiClient()
        else:
            # KUBECONFIG read now: the client's own default is fixed when it is first imported.
            api = config.new_client_from_config(config_file=kubeconfig or os.environ.get("KUBECONFIG"))
        return cls.from_api_client(api)

    @classmethod
    def from_api_client(cls, api: client.ApiClient) -> Kube:
        return cls(
            api=api,
            core=client.CoreV1Api(api),
            apps=client.AppsV1Api(api),
            batch=client.BatchV1Api(api),
            autoscaling=client.AutoscalingV2Api(api),
            custom=client.CustomObjectsApi(api),
        )

    def close(self) -> None:
        self.api.close()


def is_not_found(exc: BaseException) -> bool:
    return isinstance(exc, ApiException) and exc.status == 404


def call(what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call the API; translate failures into kopf errors that name ``what`` was attempted."""
    try:
        return fn(*args, **kwargs)
    except ApiException as exc:
        if exc.status == 404:
            raise
        if exc.status in RETRYABLE_STATUSES:
            raise kopf.TemporaryError(f"{what}: API server answered {exc.status} {exc.reason}", delay=5) from exc
        if exc.status == 403:
            # RBAC, quotas and admission policies can be fixed without restarting: retry slowly.
            raise kopf.TemporaryError(
                f"{what}: forbidden: {_status_message(exc)} (RBAC: the operator's ClusterRole in manifests/; "
                "or a ResourceQuota or admission policy of the namespace)",
                delay=60,
            ) from exc
        raise kopf.PermanentError(f"{what}: API server answered {exc.status} {exc.reason}: {exc.body}") from exc
    except (OSError, urllib3.exceptions.HTTPError) as exc:
        raise kopf.TemporaryError(f"{what}: cannot reach the API server: {exc}", delay=5) from exc


def _status_message(exc: ApiException) -> str:
    """The API server's own words from a Status body, else the HTTP reason."""
    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason)
    except ValueError:
        return str(exc.reason)


# kind -> (API attribute on Kube, method suffix); e.g. Job -> batch.read_namespaced_job
KINDS: dict[str, tuple[str, str]] = {
    "Job": ("batch", "namespaced_job"),
    "Pod": ("core", "namespaced_pod"),
    "PersistentVolumeClaim": ("core", "namespaced_persistent_volume_claim"),
    "Service": ("core", "namespaced_service"),
    "Event": ("core", "namespaced_event"),
    "Deployment": ("apps", "namespaced_deployment"),
    "HorizontalPodAutoscaler": ("autoscaling", "namespaced_horizontal_pod_autoscaler"),
}


def _method(kube: Kube, kind: str, verb: str) -> Callable[..., Any]:
    group, suffix = KINDS[kind]
    return getattr(getattr(kube, group), f"{verb}_{suffix}")  # type: ignore[no-any-return]


def _plain(kube: Kube, obj: Any) -> dict[str, Any]:
    return kube.api.sanitize_for_serialization(obj)  # type: ignore[no-any-return]


def get(kube: Kube, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
    """The object as a plain dict (camelCase keys), or None when it does not exist."""
    try:
        return _plain(kube, call(f"read {kind} {namespace}/{name}", _method(kube, kind, "read"), name, namespace))
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def list_objects(kube: Kube, kind: str, namespace: str, selector: str) -> list[dict[str, Any]]:
    """Objects of a kind in a namespace matching a label selector."""
    answer = call(f"list {kind} in {namespace}", _method(kube, kind, "list"), namespace, label_selector=selector)
    return [_plain(kube, item) for item in answer.items]


def create(kube: Kube, kind: str, body: dict[str, Any]) -> dict[str, Any]:
    """Create; if it already exists (a crash after an earlier create), return the existing one."""
    meta = body["metadata"]
    what = f"create {kind} {meta['namespace']}/{meta['name']}"
    try:
        return _plain(kube, call(what, _method(kube, kind, "create"), meta["namespace"], body))
    except kopf.TemporaryError:
        existing = get(kube, kind, meta["namespace"], meta["name"])
        if existing is None:
            raise
        return existing


def patch(kube: Kube, kind: str, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
    return _plain(kube, call(f"patch {kind} {namespace}/{name}", _method(kube, kind, "patch"), name, namespace, body))


def delete(kube: Kube, kind: str, namespace: str, name: str) -> None:
    """Delete with background propagation; absent is fine."""
    try:
        call(
            f"delete {kind} {namespace}/{name}",
            _method(kube, kind, "delete"),
            name,
            namespace,
            propagation_policy="Background",
        )
    except ApiException as exc:
        if exc.status != 404:
            raise


def get_custom(kube: Kube, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
    """A slipway.dev object, or None."""
    try:
        obj = call(
            f"read {plural} {namespace}/{name}",
            kube.custom.get_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            plural,
            name,
        )
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return dict(obj)  # type: ignore[call-overload]


def create_custom(kube: Kube, plural: str, body: dict[str, Any]) -> dict[str, Any]:
    """Create a slipway.dev object; an existing one of the same name is returned instead."""
    meta = body["metadata"]
    try:
        obj = call(
            f"create {plural} {meta['namespace']}/{meta['name']}",
            kube.custom.create_namespaced_custom_object,
            GROUP,
            VERSION,
            meta["namespace"],
            plural,
            body,
        )
    except kopf.TemporaryError:
        existing = get_custom(kube, plural, meta["namespace"], meta["name"])
        if existing is None:
            raise
        return existing
    return dict(obj)  # type: ignore[call-overload]


def list_nodes(kube: Kube) -> list[dict[str, Any]]:
    return [_plain(kube, n) for n in call("list nodes", kube.core.list_node).items]


def replace(kube: Kube, kind: str, body: dict[str, Any]) -> dict[str, Any]:
    """PUT the whole object (lists such as env replaced, not merged); a conflict retries."""
    meta = body["metadata"]
    what = f"replace {kind} {meta['namespace']}/{meta['name']}"
    return _plain(kube, call(what, _method(kube, kind, "replace"), meta["name"], meta["namespace"], body))


def apply_route(kube: Kube, body: dict[str, Any]) -> None:
    """Create the Gateway API HTTPRoute, or merge-patch its spec (weights) when it exists."""
    meta = body["metadata"]
    args = ("gateway.networking.k8s.io", "v1", meta["namespace"], "httproutes")
    try:
        call(
            f"patch HTTPRoute {meta['namespace']}/{meta['name']}",
            kube.custom.patch_namespaced_custom_object,
            *args,
            meta["name"],
            {"spec": body["spec"]},
        )
    except ApiException as exc:
        if exc.status != 404:
            raise
        call(
            f"create HTTPRoute {meta['namespace']}/{meta['name']}",
            kube.custom.create_namespaced_custom_object,
            *args,
            body,
        )
