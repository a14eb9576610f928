"""The bake after a promotion (spec.rollout.bake): the new stable judged on its own pods for a while,
reverted to status.previousStable if it fails or is aborted (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from slipway.clock import rfc3339
from slipway.inference.model import Analysis, InferenceDeploymentSpec
from slipway.inference.rollbacks import RollbackReason
from slipway.inference.rollout.base import (
    ABORT_ANNOTATION,
    Desired,
    Observed,
    Plan,
    Track,
    combined_verdict,
    describe,
    make_plan,
)
from slipway.inference.rollout.records import rollback_record, rollback_tag
from slipway.inference.rollout.settled import settled
from slipway.models.base import parse_duration
from slipway.status.conditions import parse_time, reconciling, stalled


def bake_analysis(spec: InferenceDeploymentSpec) -> Analysis | None:
    """What a bake judges: spec.rollout.bake.analysis, else the canary's, with its absolute
    thresholds only (no other track to compare with); None when there is nothing to judge."""
    bake = spec.rollout.bake
    settings = (bake.analysis if bake is not None else None) or spec.rollout.analysis
    if settings is None:
        return None
    absolute = [m for m in settings.metrics if (m.max is not None or m.min is not None) and not m.dry_run]
    if not absolute:
        return None
    kept = [m.model_copy(update={"max_relative_to_stable": None}) for m in absolute]
    return settings.model_copy(update={"metrics": kept})


class Baking:
    """After a promotion (spec.rollout.bake): the new stable is analysed on its own pods every
    interval for ``duration``; more failed analyses than failureLimit (reason BakeFailed), or
    slipway.dev/abort (Aborted), revert it to status.previousStable, move the promote alias back and
    tag the version. Ready once it is over; a newer revision (``waiting``) is rolled out after."""

    def __init__(self, obs: Observed, desired: Desired, stable: Track, waiting: Desired | None = None) -> None:
        self.obs, self.desired, self.stable, self.now = obs, desired, stable, obs.now
        self.waiting = waiting  # a newer revision the spec asks for: rolled out once the bake is concluded
        status = obs.status
        bake = obs.spec.rollout.bake
        assert bake is not None
        self.duration = parse_duration(bake.duration)
        self.started = parse_time(status.get("bakeStartTime")) or self.now
        self.failed = int(status.get("failedAnalyses") or 0)
        self.settings = bake_analysis(obs.spec)
        self.previous = status.get("previousStable") or {}
        self.results = [
            r for r in (status.get("analysis") or []) if (parse_time(r.get("time")) or self.now) >= self.started
        ]
        self.changes: dict[str, Any] = {}  # this pass's analysis, for status

    def plan(self) -> Plan:
        concluded = self.judge()
        if concluded is not None and self.waiting is not None:
            concluded.wake_in = 0.0  # the waiting revision's canary starts on the next pass, not on a change
        return concluded or self.hold()

    def judge(self) -> Plan | None:
        """The bake concluded this pass: aborted, failed or passed (None: it goes on)."""
        if self.obs.annotations.get(ABORT_ANNOTATION):
            aborted = self.revert("Aborted", f"aborted by the {ABORT_ANNOTATION} annotation", None, None, {})
            aborted.consumed_annotation = ABORT_ANNOTATION
            return aborted
        if self.settings is not None and self.obs.analysis is not None:
            result = self.obs.analysis
            self.changes["analysis"] = result.to_status()
            if result.verdict == "Failed":
                self.failed += 1
                self.changes["failedAnalyses"] = self.failed
                if self.failed > self.settings.failure_limit:
                    return self.revert("BakeFailed", str(result.reason), result.metric, result.value, self.changes)
        latest = self.changes.get("analysis") or self.results
        verdict = combined_verdict([r.get("result") for r in latest]) if self.settings is not None else "Passed"
        if self.now - self.started >= self.duration and verdict != "Failed":
            finished = settled(
                replace(self.obs, status={**self.obs.status, "phase": "Baking"}), self.desired, self.stable
            )
            finished.status = {**finished.status, "bakeStartTime": None, **self.changes, "failedAnalyses": None}
            return finished
        return None

    def hold(self) -> Plan:
        changes = self.changes
        due = self.settings is not None and self.obs.analysis is None and self.next_analysis() <= 0
        left = max(0, int((self.duration - (self.now - self.started)).total_seconds()))
        failures = f", {self.failed} failed analyses" if self.failed else ""
        message = f"baking {describe(self.desired)}: {left}s of spec.rollout.bake.duration left{failures}"
        if self.waiting is not None:
            message += (
                f"; {describe(self.waiting)} waits until the bake is over "
                f"(annotate {ABORT_ANNOTATION}=true to revert now and roll it out)"
            )
        next_analysis = None if self.settings is None else max(0.0, self.next_analysis(changes))
        return make_plan(
            "Baking",
            reconciling,
            "Baking",
            message,
            progressing="True",
            stable=self.desired,
            rollout=self.desired,
            analyze=due,
            analyze_track="stable",
            status=changes,
            next_analysis=next_analysis,
        )

    def next_analysis(self, changes: Mapping[str, Any] | None = None) -> float:
        assert self.settings is not None
        latest = (changes or {}).get("analysis") or self.results
        times = [t for r in latest if (t := parse_time(r.get("time"))) is not None]
        if not times:
            return 0.0
        return (max(times) + parse_duration(self.settings.interval) - self.now).total_seconds()

    def revert(
        self, reason: RollbackReason, cause: str, metric: str | None, value: float | None, changes: dict[str, Any]
    ) -> Plan:
        """Back to status.previousStable: its pods, the promote alias moved back, the version tagged."""
        record = rollback_record(self.desired, reason, self.now, metric, value)
        before = f"{self.previous.get('modelName')} version {self.previous.get('modelVersion')}"
        text = (
            f"reverted {describe(self.desired)} during its bake ({cause}); the stable track is restored to "
            f"{before} (revision {self.previous.get('revision')})"
        )
        registry = [rollback_tag(self.desired, record, self.obs.deployment)]
        alias = self.obs.spec.rollout.promote_alias
        if alias and self.previous.get("modelVersion") and self.previous.get("modelName") == self.desired.model:
            registry.append(
                {
                    "action": "SetAlias",
                    "model": self.desired.model,
                    "version": str(self.previous["modelVersion"]),
                    "alias": alias,
                }
            )
        status = {**changes, "lastRollback": record, "bakeStartTime": None, "lastProgressTime": None}
        return make_plan(
            "RolledBack",
            stalled,
            reason,
            text,
            progressing="False",
            degraded=(reason, text),
            revert_stable=True,
            rollout=self.desired,
            registry=registry,
            durable=True,
            status=status,
        )


def settled_or_baking(obs: Observed, desired: Desired, stable: Track) -> Plan:
    """The stable serves the desired revision (see :func:`settled`); just promoted with
    spec.rollout.bake, the bake starts: the alias moves now and the new stable is watched for
    spec.rollout.bake.duration."""
    result = settled(obs, desired, stable)
    previous = obs.status
    if not stable.complete or obs.spec.rollout.bake is None:
        return result
    if previous.get("phase") != "Promoting" or not previous.get("previousStable"):
        return result
    started = {
        "bakeStartTime": rfc3339(obs.now),
        "failedAnalyses": 0,
        "analysis": None,
        "currentStep": None,
        "stepStartTime": None,
        "canaryStartTime": None,
        "lastProgressTime": None,
    }
    baking = Baking(replace(obs, status={**obs.status, **started}), desired, stable).plan()
    baking.registry, baking.durable = result.registry, True
    baking.status = {**started, **baking.status}
    return baking
