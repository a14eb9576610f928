"""The rollout planner's entry point (pure): which case a pass is in — a bake or a revert to finish,
no model, a promotion under way, the first revision, a settled stable, a rolled-back revision, a
canary — and the tracks' replica counts for it."""

from __future__ import annotations

from slipway.inference.rollout.bake import Baking, settled_or_baking
from slipway.inference.rollout.base import (
    MANUAL_ANNOTATIONS,
    RETRY_ANNOTATION,
    Observed,
    Plan,
    describe,
    describe_track,
    make_plan,
    served_by,
)
from slipway.inference.rollout.budget import size_tracks
from slipway.inference.rollout.canary import Canary
from slipway.inference.rollout.promotion import Promotion
from slipway.inference.rollout.restore import refused_beside, restored
from slipway.inference.rollout.rollbacktag import ROLLBACK_TAG, clipped
from slipway.inference.rollout.settled import first_revision, health_status, replacing_unserved
from slipway.status.conditions import reconciling, stalled


def plan(obs: Observed) -> Plan:
    """What to do next, from what is observed."""
    result = _plan_for(obs)
    if result.consumed_annotation is None:
        # A promote, abort or retry with nothing to act on is dropped, not kept for the next revision.
        result.consumed_annotation = next((a for a in MANUAL_ANNOTATIONS if obs.annotations.get(a)), None)
    size_tracks(obs, result)
    return result


def _plan_for(obs: Observed) -> Plan:
    desired, stable, status = obs.desired, obs.stable, obs.status
    baking = _bake_in_progress(obs) or _revert_unfinished(obs)
    if baking is not None:
        return baking
    if desired is None:
        message = obs.desired_problem or "the model to serve cannot be resolved"
        if stable is None or stable.revision is None:
            # Nothing served yet: typically the first model is still being trained or validated.
            return make_plan("Progressing", reconciling, "WaitingForModel", message)
        phase = status.get("phase") or "Promoted"
        return make_plan(
            phase, stalled, "ModelUnavailable", message, progressing="False", degraded=("ModelUnavailable", message)
        )
    if status.get("phase") == "Promoting" and (status.get("canary") or {}).get("revision") == desired.revision:
        return Promotion(obs, desired).plan()
    if stable is None or stable.revision is None:
        return restored(obs, desired) or first_revision(obs, desired)
    if stable.serves(desired):
        return settled_or_baking(obs, desired, stable)
    beside = refused_beside(obs, desired, stable)  # a stable status does not record, and MLflow's tag
    if beside is not None:
        return beside
    unserved = replacing_unserved(obs, desired, stable)
    if unserved is not None:
        return unserved
    last = status.get("lastRollback") or {}
    if last.get("revision") == desired.revision and not last.get("retried"):
        if obs.annotations.get(RETRY_ANNOTATION):
            retried = Canary(obs, desired, stable).plan()
            retried.status["lastRollback"] = {**last, "retried": True}
            retried.consumed_annotation = RETRY_ANNOTATION
            return retried
        # Clipped: a record an earlier release read back from a tag may hold its whole text.
        cause = clipped(last.get("reason"), 64)
        if last.get("metric"):
            cause += f": {clipped(last['metric'], 63)}={clipped(last.get('value'), 32)}"
        if last.get("tag"):  # read back from MLflow: this object was re-created without its status
            cause += f"; MLflow tag {ROLLBACK_TAG} on version {desired.version}: {clipped(last['tag'])}"
        message = (
            f"{describe(desired)} was rolled back ({cause}); stable serves {describe_track(stable)}; publish a new "
            f"version, change the spec, or annotate {RETRY_ANNOTATION}=true to try it again"
        )
        return make_plan(
            "RolledBack",
            stalled,
            "RolledBack",
            message,
            progressing="False",
            degraded=("RolledBack", message),
            status=health_status(obs),
        )
    return Canary(obs, desired, stable).plan()


def _bake_in_progress(obs: Observed) -> Plan | None:
    """A bake in progress is concluded (passed, or reverted: failed or aborted) before anything else
    rolls out. A new revision waits for it (its canary would be judged against a stable not yet
    judged, and promoting it would drop the revert the bake may still need), and the bake is never
    cut short. None: no bake in progress."""
    stable, status = obs.stable, obs.status
    if status.get("phase") != "Baking" or obs.spec.rollout.bake is None or stable is None:
        return None
    desired = obs.desired
    baked = (status.get("canary") or {}).get("revision") or (desired.revision if desired else None)
    if not baked or stable.revision != baked:
        return None  # the stable no longer serves the baked revision (it was replaced by hand): nothing to judge
    served = desired if desired is not None and stable.serves(desired) else served_by(stable)
    waiting = desired if desired is not None and desired.revision != baked else None
    return Baking(obs, served, stable, waiting).plan()


def _revert_unfinished(obs: Observed) -> Plan | None:
    """A revert on record (a promotion or a bake) whose stable still serves the reverted revision (the
    Deployment's write failed after the status's): it is carried out again, never taken for a
    promotion of that revision. None: nothing left to revert."""
    stable, status = obs.stable, obs.status
    record, previous = status.get("lastRollback") or {}, status.get("previousStable") or {}
    if status.get("phase") != "RolledBack" or stable is None or not previous.get("revision"):
        return None
    if record.get("revision") != stable.revision or previous["revision"] == stable.revision:
        return None
    reason = str(record.get("reason"))
    message = (
        f"reverting the stable track to {previous.get('modelName')} version {previous.get('modelVersion')} "
        f"(revision {previous['revision']}) after {reason}: it still serves "
        f"{describe_track(stable)}"
    )
    return make_plan(
        "RolledBack", stalled, reason, message, progressing="False", degraded=(reason, message), revert_stable=True
    )
