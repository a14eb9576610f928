"""The Kubernetes API, through the official (blocking) client.

Reconciliation passes run in worker threads, so these calls never block the
event loop. Every call has a timeout. API errors become kopf's error
vocabulary: what a retry can fix is a TemporaryError with a delay, what it
cannot is a PermanentError. Objects travel as plain dicts (camelCase keys).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import kopf
import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from slipway import kinds
from slipway.clock import rfc3339

T = TypeVar("T")

RETRYABLE_STATUSES = {409, 429, 500, 502, 503, 504}
MERGE_PATCH = "application/merge-patch+json"
# (connect, read) seconds: a half-open connection must not hold a pass for ever.
REQUEST_TIMEOUT = (5.0, 30.0)
FIELD_MANAGER = "slipway"
COMPONENT = "slipway-operator"


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
    def connect(cls, kubeconfig: str | None = None, connections: int | None = None) -> Kube:
        """In-cluster config inside a pod, else the kubeconfig (KUBECONFIG or ~/.kube/config).
        ``connections``: connections kept open to the API server, one per pass that may call it at
        once (the client's default is 5 per core: passes beyond it would each open a new TLS
        connection and drop it)."""
        settings = client.Configuration()
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=settings)
        else:
            # KUBECONFIG read now: the client's own default is fixed when it is first imported.
            config.load_kube_config(
                config_file=kubeconfig or os.environ.get("KUBECONFIG"), client_configuration=settings
            )
        if connections:
            settings.connection_pool_maxsize = max(settings.connection_pool_maxsize, connections)
        # The client's connection pool sets TCP keep-alive itself: a peer that vanished is noticed.
        return cls.from_api_client(client.ApiClient(settings))

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


class Conflict(kopf.TemporaryError):
    """409: the object changed since it was read (a stale cache, another writer). Routine: the pass
    runs again at once with what the cluster now holds, and no condition or Event says so."""


class Unavailable(kopf.TemporaryError):
    """5xx, 429, a timeout or no connection: retried with backoff (``retry_after``: the seconds the
    API server asked for in a ``Retry-After`` header, if it did)."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message, delay=retry_after or 1)
        self.retry_after = retry_after


class Forbidden(kopf.TemporaryError):
    """403: RBAC, a ResourceQuota or an admission policy or webhook refused the call. No retry soon
    changes that, a person does: the object is Stalled with the API server's words, and the call
    is tried again every ``FORBIDDEN_RETRY_SECONDS`` (a policy can be fixed without a restart)."""


FORBIDDEN_RETRY_SECONDS = 60.0


def retry_after(exc: ApiException) -> float | None:
    """The ``Retry-After`` of an answer, in seconds (an HTTP date is not one the API server sends)."""
    value = (exc.headers or {}).get("Retry-After") if exc.headers is not None else None
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def call(what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call the API with a timeout; translate failures into kopf errors that name ``what`` was attempted.

    404 is left to the caller (absent is often fine)."""
    try:
        return fn(*args, _request_timeout=REQUEST_TIMEOUT, **kwargs)
    except ApiException as exc:
        if exc.status == 404:
            raise
        if exc.status == 409:
            raise Conflict(f"{what}: API server answered 409 {exc.reason}", delay=0) from exc
        if exc.status in RETRYABLE_STATUSES:
            raise Unavailable(f"{what}: API server answered {exc.status} {exc.reason}", retry_after(exc)) from exc
        if exc.status == 403:
            raise Forbidden(
                f"{what}: forbidden: {status_message(exc)} (RBAC: the operator's ClusterRole in manifests/; "
                "or a ResourceQuota or admission policy of the namespace)",
                delay=FORBIDDEN_RETRY_SECONDS,
            ) from exc
        raise kopf.PermanentError(
            f"{what}: API server answered {exc.status} {exc.reason}: {status_message(exc)}"
        ) from exc
    except (OSError, urllib3.exceptions.HTTPError) as exc:
        raise Unavailable(f"{what}: cannot reach the API server: {exc}") from exc


def status_message(exc: ApiException) -> str:
    """The API server's own words from a Status body, else the HTTP reason."""
    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason)
    except ValueError:
        return str(exc.reason)


@dataclass(frozen=True)
class Custom:
    """A kind served through the custom-objects API (any group): its group, version and plural."""

    group: str
    version: str
    plural: str


# kind -> (API attribute on Kube, method suffix) for built-in kinds; e.g. Job -> batch.read_namespaced_job
KINDS: dict[str, tuple[str, str]] = {k.kind: k.typed for k in kinds.ALL if k.typed}
# Slipway's kinds and its children served through the custom-objects API (any group)
CUSTOM: dict[str, Custom] = {
    k.kind: Custom(k.group, k.version, k.plural) for k in (*kinds.OWN, *kinds.CHILDREN) if not k.typed
}


def _method(kube: Kube, kind: str, verb: str) -> Callable[..., Any]:
    group, suffix = KINDS[kind]
    return getattr(getattr(kube, group), f"{verb}_{suffix}")  # type: ignore[no-any-return]


def _typed(what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """A call of the typed API (Jobs, pods ...) whose answer is the API server's JSON as it came
    (camelCase, what a pass works with): the client is asked not to build its typed models from
    it, which it would then have to turn back into plain dicts. Errors are raised as by ``call``."""

    def read(*a: Any, **kw: Any) -> Any:  # the body is read within ``call``: a timeout meanwhile is Unavailable
        answer = fn(*a, _preload_content=False, **kw)
        try:
            return json.loads(answer.data)
        except ValueError as exc:
            raise Unavailable(f"{what}: the API server's answer is not JSON ({exc})") from exc

    return call(what, read, *args, **kwargs)


def _custom_call(kube: Kube, kind: str, verb: str, what: str, namespace: str, *args: Any, **kw: Any) -> dict[str, Any]:
    c = CUSTOM[kind]
    fn = getattr(kube.custom, f"{verb}_namespaced_custom_object")
    return dict(call(what, fn, c.group, c.version, namespace, c.plural, *args, **kw))


def get(kube: Kube, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
    """The object, or None when it does not exist."""
    what = f"read {kind} {namespace}/{name}"
    try:
        if kind in CUSTOM:
            return _custom_call(kube, kind, "get", what, namespace, name)
        return dict(_typed(what, _method(kube, kind, "read"), name, namespace))
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def list_objects(kube: Kube, kind: str, namespace: str, selector: str) -> list[dict[str, Any]]:
    """Objects of a kind in a namespace matching a label selector."""
    answer = _typed(f"list {kind} in {namespace}", _method(kube, kind, "list"), namespace, label_selector=selector)
    return list(answer.get("items") or [])


def creation_failure(kube: Kube, obj: dict[str, Any]) -> str | None:
    """The message of the latest FailedCreate Event of ``obj`` (a Job whose pods the API server
    refuses: Pod Security, a quota, a missing ServiceAccount), None when there is none."""
    meta = obj["metadata"]
    selector = f"involvedObject.uid={meta['uid']},reason=FailedCreate"
    answer = call(
        f"list the FailedCreate Events of {obj.get('kind')} {meta['namespace']}/{meta['name']}",
        kube.core.list_namespaced_event,
        meta["namespace"],
        field_selector=selector,
    )
    events = sorted(answer.items, key=lambda e: str(e.last_timestamp or e.event_time or e.metadata.creation_timestamp))
    return str(events[-1].message) if events else None


def create(kube: Kube, body: dict[str, Any]) -> dict[str, Any]:
    """Create the object. An existing one of the same name raises AlreadyExists (the caller decides)."""
    kind, meta = body["kind"], body["metadata"]
    what = f"create {kind} {meta['namespace']}/{meta['name']}"
    try:
        if kind in CUSTOM:
            return _custom_call(kube, kind, "create", what, meta["namespace"], body, field_manager=FIELD_MANAGER)
        return dict(_typed(what, _method(kube, kind, "create"), meta["namespace"], body, field_manager=FIELD_MANAGER))
    except Conflict as exc:
        raise AlreadyExists(kind, meta["namespace"], meta["name"]) from exc


class AlreadyExists(Exception):
    """A create found an object of that name (made by an earlier pass, or by someone else)."""

    def __init__(self, kind: str, namespace: str, name: str) -> None:
        self.kind, self.namespace, self.name = kind, namespace, name
        super().__init__(f"{kind} {namespace}/{name} already exists")


def replace(kube: Kube, body: dict[str, Any]) -> dict[str, Any]:
    """PUT the whole object (lists such as env replaced, not merged). Its resourceVersion makes
    a concurrent change a conflict (409: retried with what the cluster now holds)."""
    kind, meta = body["kind"], body["metadata"]
    what = f"replace {kind} {meta['namespace']}/{meta['name']}"
    if kind in CUSTOM:
        return _custom_call(kube, kind, "replace", what, meta["namespace"], meta["name"], body)
    fn = _method(kube, kind, "replace")
    return dict(_typed(what, fn, meta["name"], meta["namespace"], body, field_manager=FIELD_MANAGER))


def patch(kube: Kube, kind: str, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
    """JSON merge patch (RFC 7386): ``None`` removes a key."""
    what = f"patch {kind} {namespace}/{name}"
    if kind in CUSTOM:
        return _custom_call(kube, kind, "patch", what, namespace, name, body, _content_type=MERGE_PATCH)
    fn = _method(kube, kind, "patch")
    return dict(_typed(what, fn, name, namespace, body, field_manager=FIELD_MANAGER, _content_type=MERGE_PATCH))


def patch_status(kube: Kube, kind: str, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
    """Merge-patch the status subresource of a Slipway object; ``metadata.resourceVersion`` in
    ``body`` makes it conditional on the object not having changed since it was read."""
    what = f"write the status of {kind} {namespace}/{name}"
    c = CUSTOM[kind]
    fn = kube.custom.patch_namespaced_custom_object_status
    written: Any = call(what, fn, c.group, c.version, namespace, c.plural, name, body, _content_type=MERGE_PATCH)
    return dict(written)


def delete(kube: Kube, kind: str, namespace: str, name: str, uid: str | None = None) -> None:
    """Delete with background propagation; absent is fine. ``uid`` makes it delete only that object."""
    what = f"delete {kind} {namespace}/{name}"
    options: dict[str, Any] = {"propagationPolicy": "Background"}
    if uid:
        options["preconditions"] = {"uid": uid}
    try:
        if kind in CUSTOM:
            _custom_call(kube, kind, "delete", what, namespace, name, body=options)
        else:
            call(what, _method(kube, kind, "delete"), name, namespace, body=options)
    except ApiException as exc:
        if exc.status != 404:
            raise


def list_nodes(kube: Kube) -> list[dict[str, Any]]:
    return list(_typed("list nodes", kube.core.list_node).get("items") or [])


GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"


def gpu_products(kube: Kube) -> dict[str, str]:
    """Node name -> its GPU product (the label nvidia.com/gpu.product), for nodes that have one."""
    return {
        n["metadata"]["name"]: label
        for n in list_nodes(kube)
        if (label := (n["metadata"].get("labels") or {}).get(GPU_PRODUCT_LABEL))
    }


def owner_reference(owner: dict[str, Any]) -> dict[str, Any]:
    """A controller reference to ``owner``: deleting the owner deletes the child."""
    meta = owner["metadata"]
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def controller_uid(obj: dict[str, Any]) -> str | None:
    """The uid of the object's controller (its owner with ``controller: true``), if any."""
    for ref in obj.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid"))
    return None


def post_event(kube: Kube, involved: dict[str, Any], type_: str, reason: str, message: str) -> None:
    """A core/v1 Event on ``involved``, as ``kubectl describe`` and ``kubectl get events`` show it."""
    meta = involved["metadata"]
    now = rfc3339()
    body = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta['name'][:200]}.", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": involved.get("apiVersion"),
            "kind": involved.get("kind"),
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        },
        "type": type_,
        "reason": reason,
        "message": message[:1024],
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    call(
        f"post Event {reason} on {meta['namespace']}/{meta['name']}",
        kube.core.create_namespaced_event,
        meta["namespace"],
        body,
    )


SERVED_TTL_SECONDS = 60.0
_served: dict[tuple[str, str, str], tuple[bool, float]] = {}


def serves(kube: Kube, group: str, version: str, plural: str) -> bool:
    """Whether the API server serves ``plural`` in ``group/version`` (its discovery document, which
    every authenticated client may read), remembered for a minute: asked only before a run's
    first child is made, so a sweep costs one request a minute."""
    key, now = (group, version, plural), time.monotonic()
    known = _served.get(key)
    if known is not None and now - known[1] < SERVED_TTL_SECONDS:
        return known[0]
    try:
        found = call(f"discover {group}/{version}", kube.custom.get_api_resources, group, version)
        served = any(r.name == plural for r in found.resources or [])
    except ApiException as exc:
        if exc.status != 404:
            raise
        served = False
    _served[key] = (served, now)
    return served
