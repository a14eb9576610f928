"""The steps of one canary (pure): the step weights and how long each holds, then start, analyse,
advance, hold or roll back, and hand over to the promotion."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from slipway.clock import rfc3339
from slipway.inference.model import DEFAULT_MAX_WEIGHT, DEFAULT_STEP_WEIGHTS, Rollout
from slipway.inference.rollbacks import RollbackReason
from slipway.inference.rollout import cadence
from slipway.inference.rollout.base import (
    ABORT_ANNOTATION,
    PROMOTE_ANNOTATION,
    Desired,
    Observed,
    Plan,
    Track,
    combined_verdict,
    describe,
    describe_track,
    make_plan,
)
from slipway.inference.rollout.budget import total_replicas
from slipway.inference.rollout.records import cost_tags, rollback_record, rollback_tag
from slipway.inference.traffic import Sizing
from slipway.models.base import parse_duration
from slipway.status.conditions import held, parse_time, reconciling, stalled


def step_weights(rollout: Rollout) -> list[int]:
    """The canary weights of the steps, ascending; promotion follows the last."""
    if rollout.steps:
        return [s.weight for s in rollout.steps]
    if rollout.step_weight:
        top = rollout.max_weight or DEFAULT_MAX_WEIGHT
        return list(range(rollout.step_weight, top + 1, rollout.step_weight)) or [top]
    return list(DEFAULT_STEP_WEIGHTS)


def step_duration(rollout: Rollout, step: int) -> timedelta:
    """How long a step holds before it may advance: its pause, else the rollout interval."""
    pause = rollout.steps[step].pause if rollout.steps else None
    return parse_duration(pause) if pause else parse_duration(rollout.interval)


class Canary:
    """The steps of one canary: start, analyse, advance, then hand over to the promotion."""

    def __init__(self, obs: Observed, desired: Desired, stable: Track) -> None:
        self.obs, self.desired, self.stable = obs, desired, stable
        self.spec, self.now, status = obs.spec, obs.now, obs.status
        self.same = (status.get("canary") or {}).get("revision") == desired.revision and status.get(
            "phase"
        ) != "RolledBack"
        self.weights = step_weights(self.spec.rollout)
        self.step = min(int(status.get("currentStep") or 0), len(self.weights) - 1) if self.same else 0
        self.started = (parse_time(status.get("canaryStartTime")) if self.same else None) or self.now
        self.step_started = (parse_time(status.get("stepStartTime")) if self.same else None) or self.now
        self.progress = (parse_time(status.get("lastProgressTime")) if self.same else None) or self.now
        self.step_reached = self.same and bool(status.get("stepStartTime"))  # this step's pods were all ready once
        self.failed = int(status.get("failedAnalyses") or 0) if self.same else 0
        # Only analyses of this canary at this step count towards advancing it.
        analyses = (status.get("analysis") or []) if self.same else []
        self.previous_results = [r for r in analyses if (parse_time(r.get("time")) or self.now) >= self.step_started]

    def status(self, **changes: Any) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "currentStep": self.step,
            "stepStartTime": rfc3339(self.step_started),
            "canaryStartTime": rfc3339(self.started),
            "failedAnalyses": self.failed,
            "lastProgressTime": rfc3339(self.progress),
        }
        if not self.same:
            fields["analysis"] = None  # a new canary starts without the last one's results
        return {**fields, **changes}

    def serve(self, sizing: Sizing, canary_ready: int) -> dict[str, Any]:
        weight = self.weights[self.step]
        real = self.obs.router.carried(sizing, weight, canary_ready, self.stable.ready)
        return {
            "canary": self.desired,
            "canary_replicas": sizing.pods,
            "stable_target": sizing.stable,
            "weight": real,
            "requested_weight": weight,
            "route_weight": real,
            "rollout": self.desired,
        }

    def plan(self) -> Plan:
        annotations = self.obs.annotations
        if annotations.get(ABORT_ANNOTATION):
            aborted = self.rollback("Aborted", f"aborted by the {ABORT_ANNOTATION} annotation")
            aborted.consumed_annotation = ABORT_ANNOTATION
            return aborted
        if annotations.get(PROMOTE_ANNOTATION):
            promoted = self.promote()
            promoted.consumed_annotation = PROMOTE_ANNOTATION
            return promoted
        canary = self.obs.canary
        canary_ready = canary.current_ready if canary is not None and canary.serves(self.desired) else 0
        sizing = self.sizing()
        serve = self.serve(sizing, canary_ready)
        step_text = (
            f"step {self.step + 1}/{len(self.weights)} (weight {serve['weight']}% of {self.weights[self.step]}%)"
        )
        if sizing.note:
            step_text += f"; {sizing.note}"
        previously_ready = int((self.obs.status.get("canary") or {}).get("readyReplicas") or 0) if self.same else 0
        if self.spec.rollout.paused or canary_ready >= sizing.pods or canary_ready > previously_ready:
            self.progress = self.now  # a paused rollout never times out; ready pods are progress
        if self.spec.rollout.paused:
            message = f"paused at {step_text} by spec.rollout.paused"
            return make_plan("Paused", held, "Paused", message, progressing="Unknown", status=self.status(), **serve)
        if self.held_on_failure():
            return self.hold_on_failure(step_text, serve)
        if sizing.pods == 0:
            message = f"holding {step_text}: {sizing.note}"
            return make_plan(
                "Paused",
                stalled,
                "NoRoomForCanary",
                message,
                progressing="Unknown",
                status=self.status(stepStartTime=None),
                **serve,
            )
        # A step whose pods were all ready goes on while spec.replicas changes (the HPA): the split
        # follows the new total and the step's clock keeps running.
        if canary_ready < sizing.pods and not (self.step_reached and canary_ready > 0):
            return self.starting(canary_ready, sizing, serve)
        return self.analysing(step_text, sizing, serve)

    def sizing(self) -> Sizing:
        """The step's split of the serving pods, with up to maxSurgeReplicas extra pods (the GPU
        budget), as the router plans it: never fewer than spec.replicas, at least one on each track."""
        weight, total = self.weights[self.step], total_replicas(self.spec, rolling=True)
        return self.obs.router.split(weight, total, self.spec.rollout.max_surge_replicas)

    def starting(self, canary_ready: int, sizing: Sizing, serve: dict[str, Any]) -> Plan:
        deadline = self.spec.rollout.progress_deadline_seconds
        if self.now - self.progress > timedelta(seconds=deadline):
            problem = self.obs.canary.problem if self.obs.canary else None
            why = f" ({problem[0]}: {problem[1]})" if problem else ""
            message = f"no canary progress for spec.rollout.progressDeadlineSeconds={deadline}{why}"
            return self.rollback("ProgressDeadlineExceeded", message)
        message = f"starting canary {describe(self.desired)}: {canary_ready}/{sizing.pods} pods ready"
        problem = self.obs.canary.problem if self.obs.canary else None
        if problem and problem[0] == "Unschedulable":
            message = f"{message}; the canary cannot be scheduled: {problem[1]}"
            return make_plan(
                "Progressing", stalled, "CanaryUnschedulable", message, status=self.status(stepStartTime=None), **serve
            )
        if problem:
            message = f"{message}; {problem[0]}: {problem[1]}"
        return make_plan(
            "Progressing", reconciling, "CanaryStarting", message, status=self.status(stepStartTime=None), **serve
        )

    def judged(self, step_text: str, serve: dict[str, Any]) -> Plan | tuple[str, dict[str, Any]]:
        """This pass's verdict (its own analysis's, else the step's latest) and the status it
        changes; or the plan that asks for an analysis now, or holds or rolls back a failed one."""
        analysis = self.spec.rollout.analysis
        if analysis is None:
            return "Passed", {}
        result = self.obs.analysis
        if result is None:
            if self.analysis_due():
                return make_plan(
                    "Analyzing",
                    reconciling,
                    "Analyzing",
                    f"analysing the canary at {step_text}",
                    analyze=True,
                    status=self.status(),
                    **serve,
                )
            deciding = [r.get("result") for r in self.previous_results if not r.get("dryRun")]
            return (combined_verdict(deciding) if deciding or not self.previous_results else "Passed"), {}
        changes: dict[str, Any] = {"analysis": result.to_status()}
        if result.verdict == "Failed":
            self.failed += 1
            if self.failed > analysis.failure_limit and self.spec.rollout.on_failure == "Pause":
                return self.hold_on_failure(step_text, serve, result.reason, **changes)
            if self.failed > analysis.failure_limit:
                return self.rollback("AnalysisFailed", result.reason, result.metric, result.value, **changes)
        return result.verdict, changes

    def analysing(self, step_text: str, sizing: Sizing, serve: dict[str, Any]) -> Plan:
        judged = self.judged(step_text, serve)
        if isinstance(judged, Plan):
            return judged
        verdict, changes = judged
        if verdict == "Inconclusive":
            message = (
                f"holding {step_text}: analysis inconclusive ({self.inconclusive_reason()}); never promoting blind"
            )
            return make_plan(
                "Paused",
                reconciling,
                "AnalysisInconclusive",
                message,
                progressing="Unknown",
                status=self.status(**changes),
                next_analysis=self.seconds_to_analysis(changes),
                **serve,
            )
        next_analysis = self.seconds_to_analysis(changes)
        if verdict == "Passed" and self.now - self.step_started >= step_duration(self.spec.rollout, self.step):
            if self.step + 1 >= len(self.weights):
                return self.promote(**changes)
            self.step, self.step_started = self.step + 1, self.now
            sizing = self.sizing()
            serve = {
                **serve,
                "canary_replicas": sizing.pods,
                "stable_target": sizing.stable,
                "requested_weight": self.weights[self.step],
            }
            next_analysis = None  # the next step's pods start first
            changes["stepStartTime"] = None  # its pause counts from when they are ready
        failures = f", {self.failed} failed analyses" if self.failed else ""
        message = f"canary {describe(self.desired)} at {step_text}{failures}"
        return make_plan(
            "Analyzing",
            reconciling,
            "Analyzing",
            message,
            status=self.status(**changes),
            next_analysis=next_analysis,
            **serve,
        )

    def held_on_failure(self) -> bool:
        """spec.rollout.onFailure=Pause and more failed analyses than failureLimit: held for a person."""
        analysis = self.spec.rollout.analysis
        return self.spec.rollout.on_failure == "Pause" and analysis is not None and self.failed > analysis.failure_limit

    def hold_on_failure(self, step_text: str, serve: dict[str, Any], why: str | None = None, **changes: Any) -> Plan:
        """The canary keeps its step and its traffic, is analysed no more and never times out, until
        ``kubectl slipway promote`` or ``abort`` (the annotations, handled before this)."""
        self.progress = self.now
        if why is None:
            failed = [
                r
                for r in self.previous_results or (self.obs.status.get("analysis") or [])
                if r.get("result") == "Failed" and not r.get("dryRun")
            ]
            why = str(failed[0].get("message")) if failed else "analysis failed"
        message = (
            f"held at {step_text} after {self.failed} failed analyses ({why}); spec.rollout.onFailure=Pause: "
            f"`kubectl slipway promote` or `kubectl slipway abort` decides"
        )
        return make_plan(
            "Paused",
            stalled,
            "AnalysisFailed",
            message,
            progressing="Unknown",
            degraded=("AnalysisFailed", message),
            status=self.status(**changes),
            **serve,
        )

    def seconds_to_analysis(self, changes: Mapping[str, Any]) -> float | None:
        """For the pass's requeue: when the next analysis is due, after this pass's (in
        ``changes``) or the recorded one; None without analysis."""
        if self.spec.rollout.analysis is None:
            return None
        return max(0.0, self.next_analysis(changes.get("analysis")).total_seconds())

    def analysis_due(self) -> bool:
        return self.next_analysis() <= timedelta(0)

    def next_analysis(self, latest: list[dict[str, Any]] | None = None) -> timedelta:
        """How long until the next analysis is due, after the ``latest`` one (else the step's recorded
        ones): see :func:`slipway.inference.rollout.cadence.next_analysis`."""
        analysis = self.spec.rollout.analysis
        assert analysis is not None
        results = self.previous_results if latest is None else latest
        return cadence.next_analysis(analysis, results, self.now, self.step_started)

    def inconclusive_reason(self) -> str:
        results = self.obs.analysis.to_status() if self.obs.analysis else self.previous_results
        reasons = [
            str(r.get("message") or f"{r.get('metric')}: no data")
            for r in results
            if r.get("result") == "Inconclusive" and not r.get("dryRun")
        ]
        if not reasons and self.obs.analysis and self.obs.analysis.reason:
            reasons = [self.obs.analysis.reason]
        analysis = self.spec.rollout.analysis
        if not reasons and not results and analysis is not None and analysis.warmup:
            warm = cadence.warm_from(analysis, self.step_started)
            if warm > self.now:
                left = round((warm - self.now).total_seconds())
                return f"warming up: the first analysis in {left}s (spec.rollout.analysis.warmup {analysis.warmup})"
        return "; ".join(reasons) or "no analysis yet"

    def promote(self, **changes: Any) -> Plan:
        """Every step passed (or slipway.dev/promote): the decision is written first, then the
        stable is rolled while the canary's pods keep serving, under watch (see Promotion)."""
        previous = {
            "revision": self.stable.revision,
            "modelName": self.stable.model,
            "modelVersion": self.stable.version,
            "uri": self.stable.uri,
        }
        self.progress = self.now
        canary = self.obs.canary
        hold: dict[str, Any] = {"stable_target": self.stable.replicas}
        if canary is not None and canary.serves(self.desired):
            hold.update(canary=self.desired, canary_replicas=canary.replicas)  # nothing moves until the stable rolls
            share = self.obs.router.shared(canary.current_ready, self.stable.ready)
            hold.update(weight=share, route_weight=share)
        message = f"promoting {describe(self.desired)}: rolling the stable track, then moving the canary's pods to it"
        measured = self.obs.analysis.costs.get("canary") if self.obs.analysis is not None else None
        spent = measured or (self.obs.status.get("canary") or {}).get("cost") or {}
        return make_plan(
            "Promoting",
            reconciling,
            "Promoting",
            message,
            rollout=self.desired,
            durable=True,
            registry=cost_tags(self.desired, spent),
            status=self.status(previousStable=previous, **changes),
            **hold,
        )

    def rollback(
        self,
        reason: RollbackReason,
        message: str,
        metric: str | None = None,
        value: float | None = None,
        **changes: Any,
    ) -> Plan:
        record = rollback_record(self.desired, reason, self.now, metric, value)
        text = f"rolled back {describe(self.desired)}: {message}; stable keeps serving {describe_track(self.stable)}"
        tag = rollback_tag(self.desired, record, self.obs.deployment)
        return make_plan(
            "RolledBack",
            stalled,
            reason,
            text,
            progressing="False",
            degraded=(reason, text),
            rollout=self.desired,
            registry=[tag],
            durable=True,
            status=self.status(lastRollback=record, **changes),
        )
