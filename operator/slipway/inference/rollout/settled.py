"""The cases with no canary: the first revision goes to the stable track; a stable that serves the
desired revision is Ready when every replica is available, Degraded while some are not, Failed
(StableUnavailable) when that lasts past progressDeadlineSeconds (pure). A bake after a promotion
starts from here (see :func:`slipway.inference.rollout.bake.settled_or_baking`)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from slipway.clock import rfc3339
from slipway.inference.rollout.base import Desired, Observed, Plan, Track, describe, make_plan
from slipway.inference.rollout.records import set_alias
from slipway.status.conditions import get_condition, parse_time, ready, reconciling, stalled


def health_status(obs: Observed) -> dict[str, Any]:
    return {"lastProgressTime": obs.status.get("lastProgressTime") or rfc3339(obs.now)}


def first_revision(obs: Observed, desired: Desired) -> Plan:
    """No stable yet: the first revision goes to the stable track directly (nothing to compare it with)."""
    served = obs.status.get("stable") or {}
    if served.get("revision") and served.get("revision") != desired.revision and served.get("uri"):
        # The stable Deployment is gone while a new revision is pending: bring back what was served,
        # never the unanalysed new revision.
        restored = Desired(
            str(served.get("modelVersion")),
            str(served["uri"]),
            str(served.get("modelName") or ""),
            str(served["revision"]),
        )
        message = f"restoring the stable track ({describe(restored)}) before any canary"
        return make_plan("Progressing", reconciling, "RestoringStable", message, stable=restored)
    message = f"rolling out {describe(desired)} on the stable track"
    return make_plan(
        "Progressing", reconciling, "RollingOut", message, stable=desired, status={"lastProgressTime": rfc3339(obs.now)}
    )


def replacing_unserved(obs: Observed, desired: Desired, stable: Track) -> Plan | None:
    """The first revision is still rolling out and never had a ready pod (an image the kubelet
    refuses, a bad setting): a new revision (the fix) replaces it on the stable track directly, as
    the first one went. Nothing serves, so no traffic is at risk and a canary would have nothing to
    be compared with. None when anything was ever served (a canary then, as always)."""
    status = obs.status
    # Progressing keeps its reason when a spec change marks Ready and Reconciling NewGeneration.
    rolling_out = (get_condition(status.get("conditions"), "Progressing") or {}).get("reason") == "RollingOut"
    if status.get("phase") != "Progressing" or not rolling_out or stable.ready or stable.available:
        return None
    if status.get("lastRollback") or status.get("previousStable") or (status.get("canary") or {}).get("revision"):
        return None
    message = (
        f"rolling out {describe(desired)} on the stable track in place of revision {stable.revision}, "
        "which never had a ready pod"
    )
    return make_plan(
        "Progressing", reconciling, "RollingOut", message, stable=desired, status={"lastProgressTime": rfc3339(obs.now)}
    )


def settled(obs: Observed, desired: Desired, stable: Track) -> Plan:
    """The stable serves the desired revision: Ready when every desired replica is available,
    Degraded while some are not, Stalled when that lasts longer than progressDeadlineSeconds."""
    previous = obs.status
    cleared = {
        "currentStep": None,
        "stepStartTime": None,
        "canaryStartTime": None,
        "failedAnalyses": None,
        "previousStable": None,
        "lastProgressTime": None,
        "bakeStartTime": None,
    }
    if not stable.complete:
        if previous.get("phase") == "Progressing" or not stable.generation_observed or stable.updated < stable.replicas:
            message = f"rolling out {describe(desired)}: {stable.ready}/{stable.replicas} replicas ready"
            message += f"; {stable.problem[0]}: {stable.problem[1]}" if stable.problem else ""  # why not, in words
            return make_plan("Progressing", reconciling, "RollingOut", message, stable=desired)
        return degraded(obs, desired, stable)
    message = f"serving {describe(desired)} ({stable.ready}/{stable.replicas} replicas ready)"
    newly = (
        previous.get("phase") not in ("Promoted", "Baking")
        or (previous.get("stable") or {}).get("revision") != desired.revision
    )
    alias = obs.spec.rollout.promote_alias
    registry = [set_alias(desired, alias)] if newly and alias else []
    return make_plan(
        "Promoted",
        ready,
        "Promoted",
        message,
        progressing="False",
        stable=desired,
        registry=registry,
        durable=bool(registry),
        status=cleared,
    )


def degraded(obs: Observed, desired: Desired, stable: Track) -> Plan:
    detail = f"; {stable.problem[0]}: {stable.problem[1]}" if stable.problem else ""
    message = f"{stable.ready}/{stable.replicas} stable replicas ready{detail}"
    since = parse_time((get_condition(obs.status.get("conditions"), "Degraded") or {}).get("lastTransitionTime"))
    was_degraded = (get_condition(obs.status.get("conditions"), "Degraded") or {}).get("status") == "True"
    deadline = timedelta(seconds=obs.spec.rollout.progress_deadline_seconds)
    if was_degraded and since is not None and obs.now - since > deadline:
        return make_plan(
            "Failed",
            stalled,
            "StableUnavailable",
            f"{message} for more than spec.rollout.progressDeadlineSeconds={deadline.seconds}",
            progressing="False",
            degraded=("StableUnavailable", message),
            stable=desired,
        )
    return make_plan(
        "Promoted",
        reconciling,
        "StableUnavailable",
        message,
        progressing="False",
        degraded=("StableUnavailable", message),
        stable=desired,
    )
