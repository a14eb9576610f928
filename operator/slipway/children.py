"""Child reconcilers: one rule that creates, updates, keeps or deletes every child object.

A parent's handler builds the desired children (each kind's ``build`` modules, pure) and finds
the observed ones in the operator's cache; :func:`decide` compares them and
:func:`apply` carries the decision out. The same table holds for every child
kind (Job, PVC, Service, Deployment, HPA, HTTPRoute, ModelArtifact):

- missing: create it, owned by the parent (an ownerReference with ``controller``);
- owned by someone else (or by no one): refuse, never adopt (``OwnedByOther``);
- ours and equal: keep (no write: nothing is written at rest);
- ours and different: update, unless the kind is create-only (Job, PVC, ModelArtifact);
- ours and no longer wanted: delete.

"Equal" is semantic: every field Slipway sets has the value it wants, with the
API server's defaults ignored and quantities compared by value (``0.5`` is
``500m``), and a hash of the desired object, kept in an annotation, catches
fields that Slipway stopped setting.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any, Literal

from kubernetes.utils.quantity import parse_quantity

from slipway import kinds, kube

log = logging.getLogger(__name__)
APPLIED_HASH = "slipway.dev/applied-hash"
Action = Literal["Create", "Update", "Keep", "Refuse", "Delete"]


# How each child kind is updated (kinds.py).
rules = kinds.derived(lambda table: {k.kind: k.rule for k in table if k.rule is not None})
# What each parent kind may write, by kind and API version: anything else is refused before any
# request, whatever a spec, an annotation or a cached object says.
child_kinds = kinds.derived(lambda table: {p: kinds.children_of(p) for k in table for p in k.parents})


class ForeignWrite(Exception):
    """A write that is not one of the parent's own children: another namespace, kind or name."""


def check_child(owner: Mapping[str, Any], desired: Mapping[str, Any], name: str | None = None) -> None:
    """Refuse (:class:`ForeignWrite`) a child outside the parent's namespace, of a kind (or API
    version) the parent's kind never makes, or (when ``name`` is given) under another name."""
    meta = desired.get("metadata") or {}
    owner_meta = owner.get("metadata") or {}
    parent = f"{owner.get('kind')} {owner_meta.get('namespace')}/{owner_meta.get('name')}"
    what = f"{desired.get('apiVersion')} {desired.get('kind')} {meta.get('namespace')}/{meta.get('name')}"
    allowed = child_kinds().get(str(owner.get("kind")), {})
    if allowed.get(str(desired.get("kind"))) != desired.get("apiVersion"):
        raise ForeignWrite(f"{parent}: refused to write {what}: not a kind {owner.get('kind')} makes")
    if meta.get("namespace") != owner_meta.get("namespace"):
        raise ForeignWrite(f"{parent}: refused to write {what}: outside the namespace {owner_meta.get('namespace')}")
    if name is not None and meta.get("name") != name:
        raise ForeignWrite(f"{parent}: refused to write {what}: its child is named {name}")


@dataclass(frozen=True)
class Decision:
    action: Action
    kind: str
    name: str
    message: str = ""


class OwnedByOther(Exception):
    """A child's name is taken by an object this parent does not own."""

    def __init__(self, decision: Decision) -> None:
        self.decision = decision
        super().__init__(decision.message)


def desired_hash(desired: Mapping[str, Any]) -> str:
    """A stable digest of what Slipway wants (the object without its hash annotation)."""
    meta = dict(desired.get("metadata") or {})
    meta["annotations"] = {k: v for k, v in (meta.get("annotations") or {}).items() if k != APPLIED_HASH}
    text = json.dumps({**desired, "metadata": meta}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _as_quantity(value: Any) -> Decimal | None:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    try:
        return Decimal(parse_quantity(value))
    except (ValueError, InvalidOperation, TypeError):
        return None


def difference(observed: Any, desired: Any, path: str = "") -> str | None:
    """The first path where ``observed`` lacks a value of ``desired`` (defaults the API server adds
    are ignored, quantities compared by value), or None when it has them all."""
    if isinstance(desired, Mapping | list) and not desired and observed is None:
        return None
    if isinstance(desired, Mapping):
        if not isinstance(observed, Mapping):
            return path or "."
        for key, value in desired.items():
            found = difference(observed.get(key), value, f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(desired, list):
        if not isinstance(observed, list) or len(observed) != len(desired):
            return path
        for i, (o, d) in enumerate(zip(observed, desired, strict=True)):
            found = difference(o, d, f"{path}[{i}]")
            if found:
                return found
        return None
    if observed == desired:
        return None
    if observed is None and desired in ("", 0, False):
        return None  # the API server omits empty values (omitempty): absent is the same
    if isinstance(desired, str) and isinstance(observed, str) and desired and observed:
        # Quantities are stored canonically: "0.5" comes back as "500m", "1024Mi" as "1Gi".
        a, b = _as_quantity(desired), _as_quantity(observed)
        if a is not None and a == b:
            return None
    return path


def covers(observed: Any, desired: Any) -> bool:
    """True when ``observed`` has every value of ``desired``."""
    return difference(observed, desired) is None


def _is_ours(observed: Mapping[str, Any], owner_uid: str) -> bool:
    return kube.controller_uid(dict(observed)) == owner_uid


def decide(desired: Mapping[str, Any], observed: Mapping[str, Any] | None, owner_uid: str) -> Decision:
    """The decision table for one wanted child."""
    kind, name = desired["kind"], desired["metadata"]["name"]
    if observed is None:
        return Decision("Create", kind, name)
    if not _is_ours(observed, owner_uid):
        holder = kube.controller_uid(dict(observed))
        who = f"the object with uid {holder}" if holder else "no controller (made by hand or another tool)"
        message = (
            f"{kind} {desired['metadata']['namespace']}/{name} already exists and is owned by {who}; "
            "Slipway never adopts it: delete or rename it"
        )
        return Decision("Refuse", kind, name, message)
    if rules()[kind].create_only:
        return Decision("Keep", kind, name)
    applied = (observed.get("metadata", {}).get("annotations") or {}).get(APPLIED_HASH)
    wanted = {k: v for k, v in desired.items() if k not in ("metadata", "status")}
    wanted["metadata"] = {"labels": desired["metadata"].get("labels") or {}}
    differs = difference(observed, wanted)
    if differs is None and applied == desired_hash(desired):
        return Decision("Keep", kind, name)
    return Decision("Update", kind, name, f"{differs} differs" if differs else "what Slipway sets changed")


def stale(observed: Iterable[Mapping[str, Any]], wanted: Iterable[str], owner_uid: str) -> list[Decision]:
    """Delete decisions for this parent's children (of one kind) that are no longer wanted."""
    keep = set(wanted)
    return [
        Decision("Delete", obj["kind"], obj["metadata"]["name"])
        for obj in observed
        if _is_ours(obj, owner_uid) and obj["metadata"]["name"] not in keep
    ]


def updated(observed: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any]:
    """The observed object with Slipway's fields set as desired and everything else kept."""
    body = copy.deepcopy(dict(observed))
    body.pop("status", None)
    meta = body["metadata"]
    for key in ("labels", "annotations"):
        merged = {**(meta.get(key) or {}), **(desired["metadata"].get(key) or {})}
        if merged:
            meta[key] = merged
    meta.setdefault("annotations", {})[APPLIED_HASH] = desired_hash(desired)
    spec = body.setdefault("spec", {})
    want = desired.get("spec") or {}
    for key in set(want) | rules()[desired["kind"]].removable:
        if key in want:
            spec[key] = copy.deepcopy(want[key])
        else:
            spec.pop(key, None)
    body["apiVersion"], body["kind"] = desired["apiVersion"], desired["kind"]
    return body


@dataclass
class Applied:
    """What one reconcile of a parent's children did."""

    decisions: list[Decision] = field(default_factory=list)
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> object after the pass

    @property
    def changed(self) -> bool:
        return any(d.action in ("Create", "Update", "Delete") for d in self.decisions)


def apply(
    k: kube.Kube,
    owner: Mapping[str, Any],
    desired: Mapping[str, Any],
    observed: Mapping[str, Any] | None,
    create_extra: Mapping[str, Any] | None = None,
) -> tuple[Decision, dict[str, Any] | None]:
    """Reconcile one wanted child; returns the decision and the object as it now is.

    ``create_extra`` is merged into ``spec`` only when creating (a Deployment's first replica
    count, which the HPA owns afterwards). Raises :class:`OwnedByOther` for a refused child and
    :class:`ForeignWrite` for anything that is not a child of ``owner`` (see :func:`check_child`)."""
    check_child(owner, desired)
    owner_uid = owner["metadata"]["uid"]
    decision = decide(desired, observed, owner_uid)
    if decision.action == "Refuse":
        raise OwnedByOther(decision)
    if decision.action == "Keep":
        return decision, dict(observed) if observed is not None else None
    if decision.action == "Update":
        assert observed is not None
        log.info(
            "updating %s %s/%s: %s", decision.kind, desired["metadata"]["namespace"], decision.name, decision.message
        )
        return decision, kube.replace(k, updated(observed, desired))
    body = copy.deepcopy(dict(desired))
    if "spec" in body or create_extra:  # a ServiceAccount, a Role or a RoleBinding has none
        body["spec"] = {**(body.get("spec") or {}), **(create_extra or {})}
    body["metadata"]["ownerReferences"] = [kube.owner_reference(dict(owner))]
    body["metadata"].setdefault("annotations", {})[APPLIED_HASH] = desired_hash(desired)
    try:
        return decision, kube.create(k, body)
    except kube.AlreadyExists:
        # Made since the cache was read: by an earlier pass of ours, or by someone else.
        current = kube.get(k, desired["kind"], desired["metadata"]["namespace"], desired["metadata"]["name"])
        if current is None:
            raise
        return apply(k, owner, desired, current, create_extra)


def delete(k: kube.Kube, decision: Decision, namespace: str, observed: Mapping[str, Any]) -> None:
    """Delete a child that is no longer wanted (only that very object: uid precondition)."""
    kube.delete(k, decision.kind, namespace, decision.name, uid=observed["metadata"].get("uid"))
