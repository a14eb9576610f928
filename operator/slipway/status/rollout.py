"""The rollout state machine of an InferenceDeployment (pure).

Input: what is observed (the version the spec asks for, the stable and canary
Deployments, the previous status, annotations, the clock and, when one was run,
the latest analysis). Output: a Plan — what the tracks should serve, whether to
analyse now, whether to move the ``production`` alias, and the new status.
Everything is recomputed on each pass, so an operator restart at any step
carries on from that step.

Traffic in ``Replicas`` mode is the canary's share of ready replicas; the canary
never has more than ``maxSurgeReplicas`` pods, so the GPU budget holds (the
weight a step asks for is a target, capped by that budget). In ``GatewayAPI``
mode the HTTPRoute carries the exact weight.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from slipway.analysis import AnalysisOutcome
from slipway.builders.inferencedeployment import URI_ANNOTATION, VERSION_LABEL
from slipway.models.base import parse_duration
from slipway.models.inferencedeployment import InferenceDeploymentSpec, Rollout, TrackStatus
from slipway.status.conditions import Cond, Status, ready, reconciling, stalled

PROMOTE_ANNOTATION = "slipway.dev/promote"
ABORT_ANNOTATION = "slipway.dev/abort"
MANUAL_ANNOTATIONS = (PROMOTE_ANNOTATION, ABORT_ANNOTATION)
DEFAULT_STEPS = (20, 50)


@dataclass(frozen=True)
class Desired:
    """The model version the spec asks for (resolved from a ModelArtifact or an MLflow alias)."""

    version: str
    uri: str


@dataclass(frozen=True)
class Track:
    """An observed Deployment."""

    version: str | None
    uri: str | None
    replicas: int
    ready: int
    updated: int
    generation_observed: bool
    pods: int  # non-terminated pods

    @property
    def current_ready(self) -> int:
        """Ready pods of the current template (a rolling update's old pods do not count)."""
        return min(self.ready, self.updated) if self.generation_observed else 0

    @property
    def rolled_out(self) -> bool:
        """Every pod runs the current template and at least one is ready. A scale-up (the HPA)
        does not make a rolled-out track roll out again."""
        return self.generation_observed and self.updated >= self.replicas and self.current_ready >= 1


@dataclass
class Observed:
    spec: InferenceDeploymentSpec
    desired: Desired | None
    desired_problem: str | None
    stable: Track | None
    canary: Track | None
    status: dict[str, Any]
    annotations: dict[str, str]
    now: datetime
    analysis: AnalysisOutcome | None = None


@dataclass
class Plan:
    phase: str
    conditions: list[Cond]
    stable: Desired | None = None  # what the stable Deployment should serve (None: leave it as it is)
    canary: Desired | None = None  # what the canary Deployment should serve (None: scaled to zero)
    canary_replicas: int = 0
    weight: int = 0
    rollout_version: str | None = None  # the version being rolled out, for status.canary
    analyze: bool = False
    move_production_to: str | None = None
    rollback: dict[str, Any] | None = None
    consumed_annotation: str | None = None
    status: dict[str, Any] = field(default_factory=dict)


def step_weights(rollout: Rollout) -> list[int]:
    """The canary weights of the steps, ascending; promotion follows the last."""
    if rollout.steps:
        return [s.weight for s in rollout.steps]
    if rollout.step_weight:
        top = rollout.max_weight or 50
        return list(range(rollout.step_weight, top + 1, rollout.step_weight)) or [top]
    return list(DEFAULT_STEPS)


def step_duration(rollout: Rollout, step: int) -> timedelta:
    """How long a step holds before it may advance: its pause, else the rollout interval."""
    pause = rollout.steps[step].pause if rollout.steps else None
    if pause:
        return parse_duration(pause)
    return parse_duration(rollout.interval)


def canary_replicas_for(weight: int, stable_ready: int, max_surge: int) -> int:
    """Canary pods for a target weight over the stable's ready pods, within the surge budget."""
    if weight >= 100:
        return max_surge
    wanted = math.ceil(weight * max(1, stable_ready) / (100 - weight))
    return max(1, min(max_surge, wanted))


def replica_weight(canary_ready: int, stable_ready: int) -> int:
    total = canary_ready + stable_ready
    return round(100 * canary_ready / total) if total else 0


def _ts(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def _iso(value: datetime) -> str:
    return value.replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _plan(
    phase: str,
    summary: Callable[[str, str], list[Cond]],
    reason: str,
    message: str,
    progressing: Status = "True",
    degraded: bool = False,
    **kw: Any,
) -> Plan:
    """A plan whose summary, Progressing and Degraded conditions tell the same story."""
    conditions = [
        *summary(reason, message),
        Cond("Progressing", progressing, reason, message),
        Cond("Degraded", "True" if degraded else "False", reason, message if degraded else ""),
    ]
    return Plan(phase, conditions, **kw)


def plan(obs: Observed) -> Plan:
    """What to do next, from what is observed."""
    result = _plan_for(obs)
    if result.consumed_annotation is None:
        # A promote or abort with no canary to act on is dropped, not kept for the next version.
        result.consumed_annotation = next((a for a in MANUAL_ANNOTATIONS if obs.annotations.get(a)), None)
    return result


def _plan_for(obs: Observed) -> Plan:
    if obs.desired is None:
        message = obs.desired_problem or "the model to serve cannot be resolved"
        if obs.stable is None or obs.stable.version is None:
            # Nothing served yet: typically the first model is still being trained or validated.
            return _plan("Progressing", reconciling, "WaitingForModel", message)
        phase = obs.status.get("phase") or "Promoted"
        return _plan(phase, stalled, "ModelUnavailable", message, progressing="False", degraded=True)
    stable = obs.stable
    served = obs.status.get("stable") or {}
    if (
        (stable is None or stable.version is None)
        and served.get("modelVersion")
        and served.get("uri")
        and (served["modelVersion"] != obs.desired.version)
    ):
        # The stable Deployment is gone while a new version is pending: bring back what was served,
        # never the unanalysed new version.
        restored = Desired(str(served["modelVersion"]), str(served["uri"]))
        message = f"restoring the stable track (version {restored.version}) before any canary"
        return _plan("Progressing", reconciling, "RestoringStable", message, stable=restored)
    if stable is None or stable.version is None or stable.version == obs.desired.version:
        return _stable_only(obs, obs.desired, stable)
    last = obs.status.get("lastRollback") or {}
    if last.get("modelVersion") == obs.desired.version:
        # A version that was rolled back is not retried; a new version starts a new canary.
        cause = str(last.get("reason"))
        if last.get("metric"):
            cause += f": {last['metric']}={last.get('value')}"
        message = (
            f"version {obs.desired.version} was rolled back ({cause}); stable serves "
            f"{stable.version}; publish a new version to roll out again"
        )
        return _plan("RolledBack", stalled, "RolledBack", message, progressing="False", degraded=True)
    return Canary(obs, obs.desired, stable).plan()


def _stable_only(obs: Observed, desired: Desired, stable: Track | None) -> Plan:
    """No canary: the first version, or the stable track already serves what is asked."""
    if stable is None or not stable.rolled_out:
        message = f"rolling out version {desired.version} on the stable track"
        return _plan("Progressing", reconciling, "RollingOut", message, stable=desired)
    message = f"serving version {desired.version} ({stable.ready}/{stable.replicas} replicas ready)"
    previous = obs.status
    newly = previous.get("phase") != "Promoted" or (previous.get("stable") or {}).get("modelVersion") != desired.version
    cleared = {"currentStep": None, "stepStartTime": None, "canaryStartTime": None, "failedAnalyses": None}
    return _plan(
        "Promoted",
        ready,
        "Promoted",
        message,
        progressing="False",
        stable=desired,
        move_production_to=desired.version if newly else None,
        status=cleared,
    )


class Canary:
    """The steps of one canary: start, analyse, advance, promote or roll back."""

    def __init__(self, obs: Observed, desired: Desired, stable: Track) -> None:
        self.obs, self.desired, self.stable = obs, desired, stable
        self.spec = obs.spec
        self.now = obs.now
        status = obs.status
        self.same = (status.get("canary") or {}).get("modelVersion") == desired.version
        self.weights = step_weights(self.spec.rollout)
        self.step = min(int(status.get("currentStep") or 0), len(self.weights) - 1) if self.same else 0
        self.started = (_ts(status.get("canaryStartTime")) if self.same else None) or self.now
        self.step_started = (_ts(status.get("stepStartTime")) if self.same else None) or self.now
        self.failed = int(status.get("failedAnalyses") or 0) if self.same else 0
        # Only analyses of this canary at this step count towards advancing it.
        self.previous_results = [
            r
            for r in (status.get("analysis") or [])
            if self.same and (_ts(r.get("time")) or self.now) >= self.step_started
        ]
        self.promoting = self.same and status.get("phase") == "Promoting"

    def status(self, **changes: Any) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "currentStep": self.step,
            "stepStartTime": _iso(self.step_started),
            "canaryStartTime": _iso(self.started),
            "failedAnalyses": self.failed,
        }
        if not self.same:
            fields["analysis"] = None  # a new canary starts without the last one's results
        return {**fields, **changes}

    def plan(self) -> Plan:
        annotations = self.obs.annotations
        if annotations.get(ABORT_ANNOTATION):
            aborted = self.rollback("Aborted", f"aborted by the {ABORT_ANNOTATION} annotation")
            aborted.consumed_annotation = ABORT_ANNOTATION
            return aborted
        if self.promoting or annotations.get(PROMOTE_ANNOTATION):
            promoted = self.promote()
            promoted.consumed_annotation = PROMOTE_ANNOTATION if annotations.get(PROMOTE_ANNOTATION) else None
            return promoted
        canary = self.obs.canary
        canary_ready = canary.current_ready if canary and canary.version == self.desired.version else 0
        replicas = canary_replicas_for(self.weights[self.step], self.stable.ready, self.spec.rollout.max_surge_replicas)
        weight = self.weight(canary_ready, replicas)
        serve: dict[str, Any] = {"canary": self.desired, "canary_replicas": replicas, "weight": weight,
                 "rollout_version": self.desired.version}  # fmt: skip
        if canary_ready < replicas:
            return self.starting(canary_ready, replicas, serve)
        step_text = f"step {self.step + 1}/{len(self.weights)} (weight {weight}%)"
        if self.spec.rollout.paused:
            message = f"paused at {step_text} by spec.rollout.paused"
            return _plan("Paused", reconciling, "Paused", message, progressing="Unknown", status=self.status(), **serve)
        analysis = self.spec.rollout.analysis
        verdict = "Passed"
        changes: dict[str, Any] = {}
        if analysis is not None:
            result = self.obs.analysis
            if result is None:
                if self.analysis_due():
                    message = f"analysing the canary at {step_text}"
                    return _plan("Analyzing", reconciling, "Analyzing", message, analyze=True, status=self.status(),
                                 **serve)  # fmt: skip
                verdict = _combined([r.get("result") for r in self.previous_results])
            else:
                verdict = result.verdict
                changes["analysis"] = result.to_status()
                if verdict == "Failed":
                    self.failed += 1
                    if self.failed > analysis.failure_limit:
                        return self.rollback("AnalysisFailed", result.reason, result.metric, result.value)
        if verdict == "Inconclusive":
            message = (
                f"holding {step_text}: analysis inconclusive ({self.inconclusive_reason()}); never promoting blind"
            )
            return _plan("Paused", reconciling, "AnalysisInconclusive", message, progressing="Unknown",
                         status=self.status(**changes), **serve)  # fmt: skip
        if verdict == "Passed" and self.now - self.step_started >= step_duration(self.spec.rollout, self.step):
            if self.step + 1 >= len(self.weights):
                return self.promote(**changes)
            self.step += 1
            self.step_started = self.now
            serve["canary_replicas"] = canary_replicas_for(
                self.weights[self.step], self.stable.ready, self.spec.rollout.max_surge_replicas
            )
        failures = f", {self.failed} failed analyses" if self.failed else ""
        message = f"canary version {self.desired.version} at step {self.step + 1}/{len(self.weights)}, weight {weight}%"
        return _plan("Analyzing", reconciling, "Analyzing", message + failures, status=self.status(**changes), **serve)

    def weight(self, canary_ready: int, replicas: int) -> int:
        if self.spec.traffic.mode == "GatewayAPI":
            return self.weights[self.step] if canary_ready >= replicas else 0
        return replica_weight(canary_ready, self.stable.ready)

    def starting(self, canary_ready: int, replicas: int, serve: dict[str, Any]) -> Plan:
        deadline = self.spec.rollout.progress_deadline_seconds
        if self.now - self.step_started > timedelta(seconds=deadline):
            message = f"the canary was not ready within spec.rollout.progressDeadlineSeconds={deadline}"
            return self.rollback("ProgressDeadlineExceeded", message)
        message = f"starting canary version {self.desired.version}: {canary_ready}/{replicas} pods ready"
        return _plan("Progressing", reconciling, "CanaryStarting", message, status=self.status(), **serve)

    def analysis_due(self) -> bool:
        analysis = self.spec.rollout.analysis
        assert analysis is not None
        times = [t for t in (_ts(r.get("time")) for r in self.previous_results) if t is not None]
        return not times or self.now - max(times) >= parse_duration(analysis.interval)

    def inconclusive_reason(self) -> str:
        results = self.obs.analysis.to_status() if self.obs.analysis else self.previous_results
        reasons = [
            str(r.get("message") or f"{r.get('metric')}: no data") for r in results if r.get("result") == "Inconclusive"
        ]
        if not reasons and self.obs.analysis and self.obs.analysis.reason:
            reasons = [self.obs.analysis.reason]
        return "; ".join(reasons) or "no analysis yet"

    def promote(self, **changes: Any) -> Plan:
        """Scale the canary away first, then roll the stable track: never both at once (GPU budget)."""
        canary_gone = self.obs.canary is None or self.obs.canary.pods == 0
        step = "rolling the stable track" if canary_gone else "scaling the canary down"
        message = f"promoting version {self.desired.version}: {step}"
        return _plan(
            "Promoting",
            reconciling,
            "Promoting",
            message,
            stable=self.desired if canary_gone else None,
            rollout_version=self.desired.version,
            status=self.status(**changes),
        )

    def rollback(self, reason: str, message: str, metric: str | None = None, value: float | None = None) -> Plan:
        record: dict[str, Any] = {"reason": reason, "modelVersion": self.desired.version, "time": _iso(self.now)}
        if metric is not None:
            record["metric"] = metric
        if value is not None:
            record["value"] = float(f"{value:.6g}")
        text = f"rolled back version {self.desired.version}: {message}; stable keeps serving {self.stable.version}"
        return _plan(
            "RolledBack",
            stalled,
            reason,
            text,
            progressing="False",
            degraded=True,
            rollback=record,
            rollout_version=self.desired.version,
            status=self.status(lastRollback=record),
        )


def _combined(results: list[str | None]) -> str:
    """The verdict of the latest analysis: any Failed fails, any Inconclusive holds, none yet holds."""
    if "Failed" in results:
        return "Failed"
    if "Inconclusive" in results or not results:
        return "Inconclusive"
    return "Passed"


def track_of(deployment: Mapping[str, Any] | None) -> Track | None:
    """A track as observed from its Deployment."""
    if deployment is None:
        return None
    status = deployment.get("status") or {}
    template = deployment["spec"]["template"]["metadata"]
    return Track(
        version=(template.get("labels") or {}).get(VERSION_LABEL),
        uri=(deployment["metadata"].get("annotations") or {}).get(URI_ANNOTATION),
        replicas=int(deployment["spec"].get("replicas") or 0),
        ready=int(status.get("readyReplicas") or 0),
        updated=int(status.get("updatedReplicas") or 0),
        generation_observed=int(status.get("observedGeneration") or 0) >= int(deployment["metadata"]["generation"]),
        pods=int(status.get("replicas") or 0),
    )


def track_statuses(decision: Plan, stable: Track | None, canary: Track | None) -> tuple[TrackStatus, TrackStatus]:
    """status.stable and status.canary: what each track serves, its pods and its share of traffic."""

    def of(track: Track | None, weight: int) -> TrackStatus:
        if track is None:
            return TrackStatus(replicas=0, ready_replicas=0, weight=0)
        return TrackStatus(model_version=track.version or None, uri=track.uri or None, replicas=track.replicas,
                           ready_replicas=track.ready, weight=weight)  # fmt: skip

    canary_status = of(canary, decision.weight)
    if decision.rollout_version is not None:
        canary_status.model_version = decision.rollout_version
    elif canary is not None and not canary.replicas:
        canary_status.model_version = None
    return of(stable, 100 - decision.weight), canary_status


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
    return Desired(str(version), f"models:/{model}/{version}"), ""
