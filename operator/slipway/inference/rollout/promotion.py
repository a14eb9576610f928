"""The guarded promotion (pure): the stable rolls to the new revision while the canary's pods keep
serving, is reverted if its roll makes no progress within the deadline, then takes the canary's pods."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from slipway.clock import rfc3339
from slipway.inference.rollbacks import RollbackReason
from slipway.inference.rollout.bake import settled_or_baking
from slipway.inference.rollout.base import ABORT_ANNOTATION, Desired, Observed, Plan, Track, describe, make_plan
from slipway.inference.rollout.budget import total_replicas
from slipway.inference.rollout.records import rollback_record, rollback_tag
from slipway.status.conditions import parse_time, reconciling, stalled


class Promotion:
    """After the last step: the stable rolls to the new revision at its current count while the
    canary's pods keep serving (so capacity never drops below the budget's floor), the roll is
    watched (complete within the deadline, or it is reverted), then the canary's pods move to the
    stable track within the budget, until the stable holds all of spec.replicas."""

    def __init__(self, obs: Observed, desired: Desired) -> None:
        self.obs, self.desired, self.now = obs, desired, obs.now
        status = obs.status
        self.previous = status.get("previousStable") or {}
        self.progress = parse_time(status.get("lastProgressTime")) or self.now
        self.deadline = timedelta(seconds=obs.spec.rollout.progress_deadline_seconds)

    def plan(self) -> Plan:
        stable, canary = self.obs.stable, self.obs.canary
        if self.obs.annotations.get(ABORT_ANNOTATION):
            reverted = self.revert("PromotionAborted", f"promotion aborted by the {ABORT_ANNOTATION} annotation")
            reverted.consumed_annotation = ABORT_ANNOTATION
            return reverted
        total = total_replicas(self.obs.spec, rolling=True)
        serving = canary is not None and canary.serves(self.desired)
        canary_replicas = canary.replicas if canary is not None and serving else 0
        canary_pods = canary.pods if canary is not None else 0
        hold: dict[str, Any] = {"canary": self.desired, "canary_replicas": canary_replicas} if serving else {}
        canary_ready = canary.current_ready if canary is not None and serving else 0
        if serving:  # both tracks serve while the stable rolls: the router says how they share traffic
            share = self.obs.router.shared(canary_ready, stable.ready if stable is not None else 0)
            hold.update(weight=share, route_weight=share)
        if stable is None or not stable.serves(self.desired):
            self.progress, step = self.now, "rolling the stable track"
            hold["stable_target"] = stable.replicas if stable is not None else total
        elif not rolled(stable):
            before = int((self.obs.status.get("stable") or {}).get("readyReplicas") or 0)
            if stable.ready > before:
                self.progress = self.now  # new pods becoming ready is progress
            elif stable.progressed is not None and stable.progressed > self.progress:
                self.progress = min(stable.progressed, self.now)  # the controller's roll went a step on
            step = f"waiting for the stable track ({stable.ready}/{stable.replicas} ready)"
            hold["stable_target"] = stable.replicas
        elif canary_pods > 0 or canary_replicas > 0 or stable.replicas < total:
            # The new revision serves on both tracks: its pods move to the stable one, no deadline
            # (nothing to revert to any more; the stable's own health is judged once settled).
            self.progress = self.now
            problem = f"; {stable.problem[0]}: {stable.problem[1]}" if stable.problem else ""
            step = f"moving the canary's {canary_pods} pods to the stable track ({stable.ready}/{total} ready{problem})"
            if serving:
                hold.update(canary_replicas=0, stable_target=total)
        else:
            return settled_or_baking(self.obs, self.desired, stable)
        if self.now - self.progress > self.deadline:
            why = f"; {stable.problem[0]}: {stable.problem[1]}" if stable and stable.problem else ""
            return self.revert(
                "PromotionFailed",
                f"the stable track made no progress for "
                f"spec.rollout.progressDeadlineSeconds={self.deadline.seconds}{why}",
            )
        message = f"promoting {describe(self.desired)}: {step}"
        return make_plan(
            "Promoting",
            reconciling,
            "Promoting",
            message,
            rollout=self.desired,
            stable=self.desired,
            status={"lastProgressTime": rfc3339(self.progress)},
            **hold,
        )

    def revert(self, reason: RollbackReason, message: str) -> Plan:
        record = rollback_record(self.desired, reason, self.now, None, None)
        text = (
            f"reverted the promotion of {describe(self.desired)}: {message}; the stable track is restored to "
            f"{self.previous.get('modelName')} version {self.previous.get('modelVersion')} "
            f"(revision {self.previous.get('revision')})"
        )
        tag = rollback_tag(self.desired, record, self.obs.deployment)
        return make_plan(
            "RolledBack",
            stalled,
            reason,
            text,
            progressing="False",
            degraded=(reason, text),
            revert_stable=True,
            rollout=self.desired,
            registry=[tag],
            durable=True,
            status={"lastRollback": record, "lastProgressTime": None},
        )


def rolled(stable: Track) -> bool:
    """The stable's roll is over: every pod runs the current template and one is ready (or none is
    asked for). Growing it afterwards (a promotion moving the canary's pods) is no roll."""
    return (
        stable.generation_observed and stable.pods <= stable.updated and stable.current_ready >= min(stable.replicas, 1)
    )
