"""Reading and writing objects by kind: the typed API for built-in kinds, the custom-objects API
for Slipway's kinds and the children of other groups (both from :mod:`slipway.kinds`); and the
owner references that tie a child to its object. Objects travel as plain dicts (camelCase keys).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException

from slipway import kinds
from slipway.kube.connection import Conflict, Kube, Unavailable, call

MERGE_PATCH = "application/merge-patch+json"
FIELD_MANAGER = "slipway"


@dataclass(frozen=True)
class Custom:
    """A kind served through the custom-objects API (any group): its group, version and plural."""

    group: str
    version: str
    plural: str


# kind -> (API attribute on Kube, method suffix) for built-in kinds; e.g. Job -> batch.read_namespaced_job
typed_kinds = kinds.derived(lambda table: {k.kind: k.typed for k in table if k.typed})
# Slipway's kinds and the children served through the custom-objects API (any group)
custom_kinds = kinds.derived(
    lambda table: {
        k.kind: Custom(k.group, k.version, k.plural)
        for k in table
        if not k.typed and (k.group == kinds.GROUP or k.rule is not None)
    }
)


def _method(kube: Kube, kind: str, verb: str) -> Callable[..., Any]:
    group, suffix = typed_kinds()[kind]
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
    c = custom_kinds()[kind]
    fn = getattr(kube.custom, f"{verb}_namespaced_custom_object")
    return dict(call(what, fn, c.group, c.version, namespace, c.plural, *args, **kw))


def get(kube: Kube, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
    """The object, or None when it does not exist."""
    what = f"read {kind} {namespace}/{name}"
    try:
        if kind in custom_kinds():
            return _custom_call(kube, kind, "get", what, namespace, name)
        return dict(_typed(what, _method(kube, kind, "read"), name, namespace))
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def create(kube: Kube, body: dict[str, Any]) -> dict[str, Any]:
    """Create the object. An existing one of the same name raises AlreadyExists (the caller decides)."""
    kind, meta = body["kind"], body["metadata"]
    what = f"create {kind} {meta['namespace']}/{meta['name']}"
    try:
        if kind in custom_kinds():
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
    if kind in custom_kinds():
        return _custom_call(kube, kind, "replace", what, meta["namespace"], meta["name"], body)
    fn = _method(kube, kind, "replace")
    return dict(_typed(what, fn, meta["name"], meta["namespace"], body, field_manager=FIELD_MANAGER))


def patch(kube: Kube, kind: str, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
    """JSON merge patch (RFC 7386): ``None`` removes a key."""
    what = f"patch {kind} {namespace}/{name}"
    if kind in custom_kinds():
        return _custom_call(kube, kind, "patch", what, namespace, name, body, _content_type=MERGE_PATCH)
    fn = _method(kube, kind, "patch")
    return dict(_typed(what, fn, name, namespace, body, field_manager=FIELD_MANAGER, _content_type=MERGE_PATCH))


def patch_status(kube: Kube, kind: str, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
    """Merge-patch the status subresource of a Slipway object; ``metadata.resourceVersion`` in
    ``body`` makes it conditional on the object not having changed since it was read."""
    what = f"write the status of {kind} {namespace}/{name}"
    c = custom_kinds()[kind]
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
        if kind in custom_kinds():
            _custom_call(kube, kind, "delete", what, namespace, name, body=options)
        else:
            call(what, _method(kube, kind, "delete"), name, namespace, body=options)
    except ApiException as exc:
        if exc.status != 404:
            raise


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


def list_nodes(kube: Kube) -> list[dict[str, Any]]:
    return list(_typed("list nodes", kube.core.list_node).get("items") or [])
