"""The tracks as observed from their Deployments, what status.stable and status.canary say of them, and
the revision a ModelArtifact offers (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from slipway.clock import rfc3339
from slipway.inference.build import MODEL_ANNOTATION, REVISION_LABEL, URI_ANNOTATION, VERSION_LABEL
from slipway.inference.model import TrackStatus
from slipway.inference.rollout.base import Desired, Plan, Track
from slipway.mlflow.digests import is_digest
from slipway.mlflow.uris import ui_version_url
from slipway.status.conditions import get_condition, parse_time
from slipway.status.pods import missing_default_class


def track_of(
    deployment: Mapping[str, Any] | None, problem: tuple[str, str] | None = None, default_class: str = ""
) -> Track | None:
    """A track as observed from its Deployment (and the first problem its pods report). ``default_class``:
    the PriorityClass the operator gave its pods by default ("" when the spec names one)."""
    if deployment is None:
        return None
    status = deployment.get("status") or {}
    meta = deployment["metadata"]
    labels = deployment["spec"]["template"]["metadata"].get("labels") or {}
    failure = get_condition(status.get("conditions"), "ReplicaFailure") or {}
    progressing = get_condition(status.get("conditions"), "Progressing") or {}
    if problem is None and failure.get("status") == "True":
        # No pod to report anything: the API server refused to create them (the namespace's Pod
        # Security level, a ResourceQuota, a missing ServiceAccount); the controller's words say which.
        said = str(failure.get("message") or "")[:500]
        fix = missing_default_class(said, default_class, "inference_priority_class")
        problem = (str(failure.get("reason") or "FailedCreate"), f"{said}; {fix}" if fix else said)
    annotations = meta.get("annotations") or {}
    return Track(
        version=labels.get(VERSION_LABEL),
        uri=annotations.get(URI_ANNOTATION),
        replicas=int(deployment["spec"].get("replicas") or 0),
        ready=int(status.get("readyReplicas") or 0),
        updated=int(status.get("updatedReplicas") or 0),
        generation_observed=int(status.get("observedGeneration") or 0) >= int(meta["generation"]),
        pods=int(status.get("replicas") or 0),
        revision=labels.get(REVISION_LABEL),
        model=annotations.get(MODEL_ANNOTATION),
        available=int(status.get("availableReplicas") or 0),
        problem=problem,
        progressed=parse_time(progressing.get("lastUpdateTime")) if progressing.get("status") == "True" else None,
    )


def track_statuses(
    decision: Plan, stable: Track | None, canary: Track | None, ui: str = ""
) -> tuple[TrackStatus, TrackStatus]:
    """status.stable and status.canary: what each track serves (with a link to the version in the
    MLflow UI at ``ui``, if given), its pods and its share of traffic."""

    def of(track: Track | None, weight: int) -> TrackStatus:
        if track is None:
            return TrackStatus(replicas=0, ready_replicas=0, weight=0)
        return TrackStatus(
            revision=track.revision,
            model_name=track.model or None,
            model_version=track.version or None,
            uri=track.uri or None,
            replicas=track.replicas,
            ready_replicas=track.ready,
            weight=weight,
        )

    canary_status = of(canary, decision.weight)
    if decision.rollout is not None:
        canary_status = canary_status.model_copy(
            update={
                "revision": decision.rollout.revision,
                "model_name": decision.rollout.model,
                "model_version": decision.rollout.version,
                "uri": decision.rollout.uri,
            }
        )
    elif canary is None or not canary.replicas:
        canary_status = canary_status.model_copy(update={"revision": None, "model_name": None, "model_version": None})
    canary_status.requested_weight = decision.requested_weight
    canary_status.traffic_left_time = rfc3339(decision.traffic_left) if decision.traffic_left else None
    return linked(of(stable, 100 - decision.weight), ui), linked(canary_status, ui)


def linked(shown: TrackStatus, ui: str) -> TrackStatus:
    """``shown`` with the link to the version it serves in the MLflow UI at ``ui`` (none without it)."""
    if ui and shown.model_name and shown.model_version:
        shown.version_url = ui_version_url(ui, shown.model_name, shown.model_version)
    return shown


def desired_from_artifact(artifact: Mapping[str, Any] | None, namespace: str, name: str) -> tuple[Desired | None, str]:
    """(the version a ModelArtifact offers, or None and why not) — only Validated artifacts are served."""
    if artifact is None:
        return None, f"ModelArtifact {namespace}/{name} does not exist"
    status = artifact.get("status") or {}
    if status.get("phase") != "Validated":
        return (
            None,
            f"ModelArtifact {name} is {status.get('phase') or 'not ready'}; only Validated artifacts are served",
        )
    model = artifact["spec"]["model"]["name"]
    version = status.get("quantizedVersion") or status["modelVersion"]
    digest = str(status.get("filesDigest") or "")
    return Desired(str(version), f"models:/{model}/{version}", model, digest=digest if is_digest(digest) else ""), ""


def with_revision(desired: Desired, revision: str) -> Desired:
    return replace(desired, revision=revision)
