"""What the operator watches, what it keeps in memory, and whom each change wakes (kopf glue).

Indexes are keyed ``("name", namespace, name)``, ``("owner", controller uid)`` and, for
references between Slipway objects, ``("ref", namespace, referenced name)``. Children are
watched only when labelled ``app.kubernetes.io/managed-by: slipway``, so the operator does not
cache every Deployment of the cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import kopf

from slipway import GROUP, VERSION, kinds, metrics
from slipway.builders.common import MANAGED_BY
from slipway.controller import Key, fingerprint, owner_keys

SLIPWAY_ANNOTATIONS = f"{GROUP}/"

PLURALS = kinds.PLURALS
INDEXES = tuple(index for k in kinds.ALL for index in k.indexes)
MANAGED_SELECTOR = ",".join(f"{k}={v}" for k, v in MANAGED_BY.items())


def server_selectors() -> dict[tuple[str, ...], str]:
    """The label selector the API server applies to each child and pod watch (kopf's ``labels=`` on a
    handler only filters what arrives): every pod and child Slipway makes carries
    ``app.kubernetes.io/managed-by=slipway``, which its own labels win over any template's, so the
    operator lists and watches nothing else, however many Pods, Services or Deployments the cluster has."""
    return {k.resource: MANAGED_SELECTOR for k in kinds.ALL if k.managed}


def cached(body: Mapping[str, Any]) -> dict[str, Any]:
    """What the cache keeps of an object: all of it but ``metadata.managedFields``, which no pass
    reads (a replace without it keeps the server's) and which is a third of a pod's or Job's size:
    at a thousand training runs, a third of the operator's memory."""
    obj = dict(body)
    meta = obj.get("metadata")
    if isinstance(meta, Mapping) and "managedFields" in meta:
        obj["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    return obj


def _keys(body: Mapping[str, Any], refs: Iterable[str | None] = ()) -> dict[tuple[str, ...], dict[str, Any]]:
    meta = body["metadata"]
    obj = cached(body)
    keys: dict[tuple[str, ...], dict[str, Any]] = {("name", meta["namespace"], meta["name"]): obj}
    if meta.get("namespace") and body.get("apiVersion", "").startswith(f"{GROUP}/"):
        keys[("ns", meta["namespace"])] = obj  # every Slipway object of a namespace
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller"):
            keys[("owner", ref["uid"])] = obj
    for name in refs:
        if name:
            keys[("ref", meta["namespace"], name)] = obj
    return keys


def _ref(body: Mapping[str, Any], *path: str) -> str | None:
    node: Any = body.get("spec") or {}
    for part in path:
        node = node.get(part) if isinstance(node, Mapping) else None
    return node if isinstance(node, str) else None


def listed(event_type: str | None, memo: kopf.Memo) -> None:
    """kopf's listing events have no type: after a (re)list, the cache heal runs one round (``resync``)."""
    if event_type is None and memo.get("healer") is not None:
        memo.healer.relisted()


def _register_children() -> None:
    for child in kinds.CHILDREN:
        index_id, resource = child.index, child.resource

        async def index(body: kopf.Body, **_: Any) -> dict[tuple[str, ...], dict[str, Any]]:
            return _keys(body)

        async def changed(body: kopf.Body, type: str | None, memo: kopf.Memo, **_: Any) -> None:
            listed(type, memo)
            for key in owner_keys(body, PLURALS):
                memo.scheduler.wake(key)

        kopf.index(*resource, id=index_id, labels=MANAGED_BY)(index)
        kopf.on.event(*resource, id=f"wake-owner-of-{index_id}", labels=MANAGED_BY)(changed)


_register_children()


# Kueue's Workloads: one per queued Job or JobSet, owned by it, holding Kueue's verdicts (Queued, Admitted,
# Evicted). Kueue does not copy Slipway's labels to them, so they are watched unfiltered (there is
# one per Job in a Kueue queue); without Kueue installed the resource is absent and nothing is watched.
WORKLOADS = kinds.WORKLOAD.resource


@kopf.index(*WORKLOADS, id="workloads")
async def workloads(body: kopf.Body, **_: Any) -> dict[tuple[str, ...], dict[str, Any]]:
    """Workloads by their Job: ``("owner", job uid)``."""
    return _keys(body)


@kopf.on.event(*WORKLOADS, id="wake-trainingrun-of-workload")
async def workload_changed(body: kopf.Body, type: str | None, memo: kopf.Memo, **_: Any) -> None:
    listed(type, memo)
    meta = body["metadata"]
    owners = {(k.kind, k.api_version): k.index for k in (kinds.JOB, kinds.JOBSET)}
    for ref in meta.get("ownerReferences") or []:
        index = owners.get((str(ref.get("kind")), str(ref.get("apiVersion"))))
        if ref.get("controller") and index:
            owner = memo.cache.get(index, meta["namespace"], ref["name"])
            for key in owner_keys(owner or {}, PLURALS):
                memo.scheduler.wake(key)


@kopf.index("v1", "namespaces", id="namespaces")
async def namespaces(body: kopf.Body, **_: Any) -> dict[tuple[str, ...], dict[str, Any]]:
    """Namespaces, for their slipway.dev/allowed-models annotation: ``("name", "", namespace)``."""
    return {("name", "", body["metadata"]["name"]): cached(body)}


@kopf.on.event("v1", "namespaces", id="wake-objects-of-namespace")
async def namespace_changed(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A change to any of the namespace's ``slipway.dev/*`` annotations (its model allow-list, MLflow
    credentials Secret, MLflow names opted in, PriorityClasses, Gateways): every Slipway object of the
    namespace is checked again."""
    name = body["metadata"]["name"]
    annotations = body["metadata"].get("annotations") or {}
    allowed = tuple(sorted((k, v) for k, v in annotations.items() if k.startswith(SLIPWAY_ANNOTATIONS)))
    seen: dict[Key, tuple[Any, ...]] = memo.seen
    key: Key = ("namespaces", "", name)
    if seen.get(key) == allowed:
        return
    first = key not in seen
    seen[key] = allowed
    if not first:
        for plural in PLURALS.values():
            for obj in memo.cache.select(plural, "ns", name):
                memo.scheduler.wake((plural, name, obj["metadata"]["name"]))


@kopf.index(*kinds.TRAINING_RUN.resource, id=kinds.TRAINING_RUN.index)
async def trainingruns(body: kopf.Body, **_: Any) -> dict[tuple[str, ...], dict[str, Any]]:
    return _keys(body)


@kopf.index(*kinds.MODEL_ARTIFACT.resource, id=kinds.MODEL_ARTIFACT.index)
async def modelartifacts(body: kopf.Body, **_: Any) -> dict[tuple[str, ...], dict[str, Any]]:
    return _keys(body, [_ref(body, "source", "trainingRunRef", "name")])


@kopf.index(*kinds.INFERENCE_DEPLOYMENT.resource, id=kinds.INFERENCE_DEPLOYMENT.index)
async def inferencedeployments(body: kopf.Body, **_: Any) -> dict[tuple[str, ...], dict[str, Any]]:
    keys = _keys(body, [_ref(body, "model", "artifactRef", "name")])
    model = _ref(body, "model", "name")
    if model:  # follows an alias of this model: ("model", namespace, model)
        meta = body["metadata"]
        keys[("model", meta["namespace"], model)] = keys[("name", meta["namespace"], meta["name"])]
    return keys


def dependents(plural: str, body: Mapping[str, Any], memo: kopf.Memo) -> list[Key]:
    """The Slipway objects whose passes read this one's status."""
    meta = body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    if plural == "trainingruns":
        found = memo.cache.referencing("modelartifacts", namespace, name)
        return [("modelartifacts", namespace, o["metadata"]["name"]) for o in found]
    if plural == "modelartifacts":
        found = memo.cache.referencing("inferencedeployments", namespace, name)
        keys = [
            *owner_keys(body, PLURALS),
            *(("inferencedeployments", namespace, o["metadata"]["name"]) for o in found),
        ]
        # An artifact that moved aliases of its model: deployments following them look again now.
        for o in memo.cache.select("inferencedeployments", "model", namespace, _ref(body, "model", "name") or ""):
            key: Key = ("inferencedeployments", namespace, o["metadata"]["name"])
            memo.cache.alias_stale.add(key)
            keys.append(key)
        return keys
    return []


def _register_parents() -> None:
    for plural in PLURALS.values():

        async def changed(body: kopf.Body, type: str | None, memo: kopf.Memo, plural: str = plural, **_: Any) -> None:
            listed(type, memo)
            meta = body["metadata"]
            key: Key = (plural, meta["namespace"], meta["name"])
            seen: dict[Key, tuple[Any, ...]] = memo.seen
            if type == "DELETED":
                seen.pop(key, None)
                memo.scheduler.forget(key)
                memo.cache.forget(key)
                metrics.OBJECTS.forget(body["kind"], meta["namespace"], meta["name"])
            elif seen.get(key) != fingerprint(body):
                # A new object, a spec or annotation change: not the echo of our own status write.
                seen[key] = fingerprint(body)
                memo.scheduler.wake(key)
            for other in dependents(plural, body, memo):
                memo.scheduler.wake(other)

        kopf.on.event(GROUP, VERSION, plural, id=f"wake-{plural}")(changed)


_register_parents()
