"""What the operator watches, what it keeps in memory, and whom each change wakes (kopf glue).

Indexes are keyed ``("name", namespace, name)``, ``("owner", controller uid)`` and, for
references between Slipway objects, ``("ref", namespace, referenced name)``. Children are
watched only when labelled ``app.kubernetes.io/managed-by: slipway``, so the operator does not
cache every Deployment of the cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kopf

from slipway import GROUP, behaviour, kinds, metrics
from slipway.controller import Cache, Key, fingerprint, owner_keys
from slipway.names import MANAGED_BY
from slipway.packed import Packed

SLIPWAY_ANNOTATIONS = f"{GROUP}/"

PLURALS = kinds.PLURALS
indexes = kinds.derived(lambda table: tuple(index for k in table for index in k.indexes))
MANAGED_SELECTOR = ",".join(f"{k}={v}" for k, v in MANAGED_BY.items())


def server_selectors() -> dict[tuple[str, ...], str]:
    """The label selector the API server applies to each child and pod watch (kopf's ``labels=`` on a
    handler only filters what arrives): every pod and child Slipway makes carries
    ``app.kubernetes.io/managed-by=slipway``, which its own labels win over any template's, so the
    operator lists and watches nothing else, however many Pods, Services or Deployments the cluster has."""
    return {k.resource: MANAGED_SELECTOR for k in kinds.ALL if k.managed}


def cached(body: Mapping[str, Any]) -> Packed:
    """What the cache keeps of an object: all of it but ``metadata.managedFields``, which no pass
    reads (a replace without it keeps the server's) and which is a third of a pod's or Job's size,
    deflated (:class:`slipway.packed.Packed`: a Deployment's copy takes about 1.5 KB instead of the
    10 KB its dicts took with every string shared). Reads unpack a copy of their own."""
    obj = {k: v for k, v in body.items() if k != "metadata"}
    meta = body.get("metadata")
    if isinstance(meta, Mapping):
        obj["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    return Packed(obj)


def base_keys(body: Mapping[str, Any]) -> dict[tuple[str, ...], Packed]:
    meta = body["metadata"]
    obj = cached(body)
    keys: dict[tuple[str, ...], Packed] = {("name", meta["namespace"], meta["name"]): obj}
    if meta.get("namespace") and body.get("apiVersion", "").startswith(f"{GROUP}/"):
        keys[("ns", meta["namespace"])] = obj  # every Slipway object of a namespace
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller"):
            keys[("owner", ref["uid"])] = obj
    return keys


def listed(event_type: str | None, memo: kopf.Memo) -> None:
    """kopf's listing events have no type: after a (re)list, the cache heal runs one round (``resync``)."""
    if event_type is None and memo.get("healer") is not None:
        memo.healer.relisted()


def child_handlers(child: kinds.Kind) -> tuple[Any, Any]:
    """A child kind's index function (by name and controller) and the wake-up of its owner on its changes."""

    async def index(body: kopf.Body, **_: Any) -> dict[tuple[str, ...], Packed]:
        return base_keys(body)

    async def changed(body: kopf.Body, type: str | None, memo: kopf.Memo, **_: Any) -> None:
        listed(type, memo)
        for key in owner_keys(body, PLURALS):
            memo.scheduler.wake(key)

    return index, changed


def watch_child(child: kinds.Kind) -> None:
    """Index a child kind and wake its owner on its changes, listing and watching only what carries
    Slipway's managed-by label."""
    index, changed = child_handlers(child)
    kopf.index(*child.resource, id=child.index, labels=MANAGED_BY)(index)
    kopf.on.event(*child.resource, id=f"wake-owner-of-{child.index}", labels=MANAGED_BY)(changed)


for _child in kinds.CHILDREN:
    watch_child(_child)


@kopf.index("v1", "namespaces", id="namespaces")
async def namespaces(body: kopf.Body, **_: Any) -> dict[tuple[str, ...], Packed]:
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
        for registration in behaviour.registered():
            for obj in memo.cache.select(registration.index, "ns", name):
                memo.scheduler.wake((registration.plural, name, obj["metadata"]["name"]))


def own_keys(registration: behaviour.Registration, body: Mapping[str, Any]) -> dict[tuple[str, ...], Any]:
    keys = base_keys(body)
    obj = keys[("name", body["metadata"]["namespace"], body["metadata"]["name"])]
    keys.update((key, obj) for key in behaviour.index_keys(registration, body))
    return keys


def dependents(registration: behaviour.Registration, body: Mapping[str, Any], cache: Cache) -> list[Key]:
    """The Slipway objects whose passes read this one's status: the Slipway object that controls it,
    and those their kinds registered (see :func:`slipway.behaviour.dependents`)."""
    return [*owner_keys(body, PLURALS), *behaviour.dependents(registration, body, cache)]


_WATCHED: set[str] = set()


def watch(registration: behaviour.Registration) -> None:
    """Index a registered kind (by name, namespace, owner and what its behaviour adds) and wake its
    passes, and its dependents', on its changes. Once per kind."""
    if registration.plural in _WATCHED:
        return
    _WATCHED.add(registration.plural)
    resource = registration.kind.resource

    async def index(body: kopf.Body, **_: Any) -> dict[tuple[str, ...], Any]:
        return own_keys(registration, body)

    async def changed(body: kopf.Body, type: str | None, memo: kopf.Memo, **_: Any) -> None:
        listed(type, memo)
        meta = body["metadata"]
        key: Key = (registration.plural, meta["namespace"], meta["name"])
        seen: dict[Key, tuple[Any, ...]] = memo.seen
        if type == "DELETED":
            seen.pop(key, None)
            memo.scheduler.forget(key)
            memo.cache.forget(key)
            metrics.OBJECTS.forget(body["kind"], meta["namespace"], meta["name"])
        else:
            memo.cache.caught_up(key, body)
            if seen.get(key) != fingerprint(body):
                # A new object, a spec or annotation change: not the echo of our own status write.
                seen[key] = fingerprint(body)
                memo.scheduler.wake(key)
        for other in dependents(registration, body, memo.cache):
            memo.scheduler.wake(other)

    kopf.index(*resource, id=registration.index)(index)
    kopf.on.event(*resource, id=f"wake-{registration.plural}")(changed)


def watch_registered() -> None:
    """Watch every kind registered so far (the operator calls it once its kind packages are imported)."""
    for registration in behaviour.registered():
        watch(registration)
