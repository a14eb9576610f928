"""What the operator reads of the cluster beside its objects, and the Events it posts: the
FailedCreate Events of a child, the nodes' GPU products, whether the API server serves an API;
an Event on an object, as ``kubectl describe`` shows it.
"""

from __future__ import annotations

import time
from typing import Any

from kubernetes.client.exceptions import ApiException

from slipway.clock import rfc3339
from slipway.kube.connection import Kube, call
from slipway.kube.objects import list_nodes

COMPONENT = "slipway-operator"


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


def pods_of_job(kube: Kube, job: dict[str, Any]) -> list[dict[str, Any]]:
    """The pods of ``job``, by the label the Job controller gives them (read only while a step's pod
    has not started: the operator watches no step pods)."""
    meta = job["metadata"]
    answer = call(
        f"list the pods of Job {meta['namespace']}/{meta['name']}",
        kube.core.list_namespaced_pod,
        meta["namespace"],
        label_selector=f"controller-uid={meta['uid']}",
    )
    return [kube.api.sanitize_for_serialization(pod) for pod in answer.items]


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


GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"


def gpu_products(kube: Kube) -> dict[str, str]:
    """Node name -> its GPU product (the label nvidia.com/gpu.product), for nodes that have one."""
    return {
        n["metadata"]["name"]: label
        for n in list_nodes(kube)
        if (label := (n["metadata"].get("labels") or {}).get(GPU_PRODUCT_LABEL))
    }


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
