"""An InferenceDeployment with no stable of its own and no status (re-created: applied again from
Git, or restored without its status): what MLflow records decides its first stable, not the model
reference alone (pure).

- The version the spec asks for carries the ``slipway.dev/rollback`` tag naming this deployment
  (namespace/name: an earlier object of this name rolled it back; a tag naming another deployment,
  or none, is not honoured, see slipway.inference.rollout.rollbacktag): it is refused as
  ``status.lastRollback`` refuses it, and the record (bounded) is copied into ``status.lastRollback``
  so that every later pass refuses it without asking MLflow again; ``slipway.dev/retry``
  tries it again (through a canary once a stable serves).
- The promote alias names another version: that one is served first, as production serves it now;
  the version asked for is canaried against it on the next pass (or refused, as above).
- Otherwise the first revision goes to the stable track, as for a new object.
"""

from __future__ import annotations

from typing import Any

from slipway.clock import rfc3339
from slipway.inference.rollout.base import (
    RETRY_ANNOTATION,
    Desired,
    Observed,
    Plan,
    Track,
    describe,
    describe_track,
    make_plan,
)
from slipway.inference.rollout.rollbacktag import ROLLBACK_TAG, RollbackTag, owned_tag
from slipway.inference.rollout.settled import first_revision, health_status
from slipway.status.conditions import reconciling, stalled


def record_from_tag(desired: Desired, tag: RollbackTag, obs: Observed) -> dict[str, Any]:
    """A status.lastRollback for ``desired`` from its tag's whitelisted fields: the reason, time, metric
    and value, the revision this spec serves it as (the one later passes compare), and the tag as read
    (rendered again from those fields: bounded, whatever MLflow holds)."""
    record: dict[str, Any] = {
        "reason": tag.reason or "RolledBack",
        "modelName": desired.model,
        "modelVersion": desired.version,
        "revision": desired.revision,
        "time": tag.time or rfc3339(obs.now),
        "tag": tag.text(),
    }
    if tag.metric:
        record["metric"] = tag.metric
    if tag.value is not None:
        record["value"] = tag.value
    return record


def tag_cause(record: dict[str, Any], version: str) -> str:
    """Why a version read back from its tag was rolled back, naming the tag."""
    cause = str(record.get("reason"))
    if record.get("metric"):
        cause += f": {record['metric']}={record.get('value')}"
    return f"{cause}; MLflow tag {ROLLBACK_TAG} on version {version}: {record.get('tag')}"


def own_tag(obs: Observed) -> RollbackTag | None:
    """The desired version's rollback tag if it names this deployment (no other's is honoured)."""
    view = obs.registry
    return owned_tag(view.rollback_tag, obs.deployment) if view is not None else None


def restored(obs: Observed, desired: Desired) -> Plan | None:
    """The first stable of an object with no stable of its own and none on record, from what MLflow
    records (see the module's docstring). None: nothing recorded, the first revision as usual."""
    view = obs.registry
    if view is None or (obs.status.get("stable") or {}).get("revision"):
        return None
    promoted = view.promoted if view.promoted is not None and view.promoted.version != desired.version else None
    tag = own_tag(obs)
    if tag is not None and not _released(obs, desired):
        return _rolled_back(obs, desired, tag, promoted)
    if promoted is not None:
        return _production_first(obs, desired, promoted)
    return None


def refused_beside(obs: Observed, desired: Desired, stable: Track) -> Plan | None:
    """A stable Deployment is there that status does not record (one a deleted object left behind):
    a tagged version is refused just the same, no canary of it, the stable left as it is. None: not
    read, no tag, or slipway.dev/retry (the canary goes on as for any other version)."""
    tag = own_tag(obs)
    if tag is None or (obs.status.get("stable") or {}).get("revision"):
        return None
    if obs.annotations.get(RETRY_ANNOTATION) or _released(obs, desired):
        return None
    record = record_from_tag(desired, tag, obs)
    return _refusal(obs, desired, record, None, f"stable serves {describe_track(stable)}")


def _released(obs: Observed, desired: Desired) -> bool:
    """A retry of ``desired`` already on record (written by the pass that consumed the annotation)."""
    last = obs.status.get("lastRollback") or {}
    return bool(last.get("revision") == desired.revision and last.get("retried"))


def _production_first(obs: Observed, desired: Desired, promoted: Desired) -> Plan:
    alias = obs.spec.rollout.promote_alias
    message = (
        f"serving {describe(promoted)}, which MLflow alias {alias} names, on the stable track before any "
        f"canary of {describe(desired)}"
    )
    return make_plan(
        "Progressing",
        reconciling,
        "RestoringStable",
        message,
        stable=promoted,
        status={"lastProgressTime": rfc3339(obs.now)},
    )


def _rolled_back(obs: Observed, desired: Desired, tag: RollbackTag, promoted: Desired | None) -> Plan:
    """Refused as status.lastRollback refuses it (the record kept there from now on), serving what
    the promote alias names if anything; with slipway.dev/retry, released: a canary follows once a
    stable serves (with nothing else to serve, it goes to the stable track as a first revision)."""
    record = record_from_tag(desired, tag, obs)
    if obs.annotations.get(RETRY_ANNOTATION):
        retried = _production_first(obs, desired, promoted) if promoted else first_revision(obs, desired)
        retried.status["lastRollback"] = {**record, "retried": True}
        retried.consumed_annotation = RETRY_ANNOTATION
        retried.durable = True
        return retried
    alias = obs.spec.rollout.promote_alias
    serving = (
        f"stable serves {describe(promoted)}, which MLflow alias {alias} names"
        if promoted
        else ("nothing else is served (no promote alias names another version)")
    )
    return _refusal(obs, desired, record, promoted, serving)


def _refusal(obs: Observed, desired: Desired, record: dict[str, Any], stable: Desired | None, serving: str) -> Plan:
    """RolledBack as status.lastRollback refuses a version, the record from the tag put on record."""
    message = (
        f"{describe(desired)} was rolled back ({tag_cause(record, desired.version)}); {serving}; publish a new "
        f"version, change the spec, or annotate {RETRY_ANNOTATION}=true to try it again"
    )
    return make_plan(
        "RolledBack",
        stalled,
        "RolledBack",
        message,
        progressing="False",
        degraded=("RolledBack", message),
        stable=stable,
        durable=True,
        status={**health_status(obs), "lastRollback": record},
    )
