"""The rollout state machine of an InferenceDeployment (pure).

Input: what is observed (the revision the spec asks for, the stable and canary Deployments and
their pods' problems, the previous status, annotations, the clock and, when one was run, the
latest analysis). Output: a Plan — what each track should serve, how many canary pods, whether
to analyse now, the registry updates decided, and the new status. Everything is recomputed on
each pass, so an operator restart at any step carries on from that step.

A revision is the served pod template (model name, version and URI, image, command, args, env,
resources, port) identified by a hash: any new revision is canaried, a new model version being
one case. Each step splits spec.replicas (the HPA's) between the tracks within
``maxSurgeReplicas`` and ``maxUnavailableReplicas``; the traffic router of spec.traffic.mode
(``slipway.traffic``) plans the split and says what share the canary carries, and this module
never asks which router it is. ``progressDeadlineSeconds`` counts time without
progress, never a step's age. Promotion is guarded: the stable's roll is watched and reverted
if it does not complete. Decisions (rollback, promotion) are written to status first; MLflow
alias moves and tags follow as pending registry updates, retried until MLflow has them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from slipway import traffic
from slipway.analysis import AnalysisOutcome
from slipway.builders.inferencedeployment import MODEL_ANNOTATION, REVISION_LABEL, URI_ANNOTATION, VERSION_LABEL
from slipway.models.base import parse_duration
from slipway.models.inferencedeployment import Analysis, InferenceDeploymentSpec, Rollout, TrackStatus
from slipway.status.conditions import Cond, Status, get_condition, held, parse_time, ready, reconciling, stalled
from slipway.status.rollbacks import RollbackReason
from slipway.traffic import Sizing, replica_weight

# In a step's first analysis interval, an inconclusive analysis (a canary Prometheus has not yet
# scraped twice, nor seen fail 3 requests) is tried again this soon, not a whole interval later.
INCONCLUSIVE_RETRY = timedelta(seconds=2)
# How long into a step an inconclusive analysis is retried after INCONCLUSIVE_RETRY (at least the
# analysis interval): two scrapes of a pod that just became ready come up to two scrape intervals
# later (15 s each by default), and a verdict that misses the first interval must not wait a second.
INCONCLUSIVE_WINDOW = timedelta(seconds=30)

PROMOTE_ANNOTATION = "slipway.dev/promote"
ABORT_ANNOTATION = "slipway.dev/abort"
RETRY_ANNOTATION = "slipway.dev/retry"
MANUAL_ANNOTATIONS = (PROMOTE_ANNOTATION, ABORT_ANNOTATION, RETRY_ANNOTATION)
ROLLBACK_TAG = "slipway.dev/rollback"
DEFAULT_STEPS = (20, 50)


@dataclass(frozen=True)
class Desired:
    """The revision the spec asks for (resolved from a ModelArtifact or an MLflow alias)."""

    version: str
    uri: str
    model: str = ""
    revision: str = ""


@dataclass(frozen=True)
class Track:
    """An observed Deployment and the problem its pods report, if any."""

    version: str | None
    uri: str | None
    replicas: int
    ready: int
    updated: int
    generation_observed: bool
    pods: int  # non-terminated pods
    revision: str | None = None
    model: str | None = None
    available: int | None = None
    problem: tuple[str, str] | None = None  # (reason, message) of a pod that cannot run: the scheduler's words
    # When the Deployment controller last saw its roll progress (its Progressing condition's
    # lastUpdateTime: a pod of the new template made or ready, an old one gone). It sees every step
    # of a surge roll, which a pass may not: a new pod ready and an old one removed leave the
    # ready count where it was.
    progressed: datetime | None = None

    @property
    def current_ready(self) -> int:
        """Ready pods of the current template (a rolling update's old pods do not count)."""
        return min(self.ready, self.updated) if self.generation_observed else 0

    @property
    def complete(self) -> bool:
        """Every desired replica runs the current template and is available, and no pod of an older
        template is left (a rolling update counts its old pods as ready and available too)."""
        available = self.ready if self.available is None else self.available
        return (
            self.generation_observed
            and self.updated >= self.replicas
            and self.pods <= self.updated
            and min(available, self.ready) >= self.replicas
        )

    def serves(self, desired: Desired) -> bool:
        return self.revision == desired.revision


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
    stable: Desired | None = None  # roll the stable Deployment to this (None: leave it as it is)
    revert_stable: bool = False  # restore the stable's previous template (a failed promotion)
    canary: Desired | None = None  # what the canary Deployment should serve (None: scaled to zero)
    canary_replicas: int = 0  # the canary's replica count now (a move toward the step's split)
    stable_replicas: int | None = None  # the stable's replica count now (None: no stable track yet)
    stable_target: int | None = None  # the stable's count once traffic has moved (None: all of spec.replicas)
    stable_budget: tuple[int, int] | None = None  # the stable's (maxSurge, maxUnavailable) for a roll, if not spec's
    weight: int = 0  # the real share of traffic on the canary
    requested_weight: int | None = None  # the current step's weight
    route_weight: int = 0  # the weight the router sends to the canary (GatewayAPI: its backend weight)
    rollout: Desired | None = None  # the revision being rolled out, for status.canary
    analyze: bool = False
    analyze_track: str = "canary"  # whose pods an analysis judges: the canary's, or the stable's in a bake
    next_analysis: float | None = None  # seconds until the next analysis is due (a canary under analysis)
    wake_in: float | None = None  # seconds until something planned is due without a change (a held-out canary leaves)
    held_out: bool = False  # the canary's pods kept with no traffic after a rollback (scaleDownDelaySeconds)
    registry: list[dict[str, Any]] = field(default_factory=list)  # new MLflow updates, written to status first
    durable: bool = False  # a decision: write the status before acting on it
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
    return parse_duration(pause) if pause else parse_duration(rollout.interval)


def total_replicas(spec: InferenceDeploymentSpec) -> int:
    """Serving pods of both tracks: spec.replicas (the HPA's, through the scale subresource), kept
    within the autoscaling bounds as the HPA keeps it."""
    return min(spec.autoscaling.max_replicas, max(spec.autoscaling.min_replicas, spec.replicas))


def canary_sizing(mode: str, weight: int, total: int, max_surge: int) -> Sizing:
    """The step's split of ``total`` serving pods, with up to ``max_surge`` extra pods (the GPU
    budget), as the router of ``mode`` (spec.traffic.mode) plans it: never fewer than ``total``
    pods, at least one on each track."""
    return traffic.router(mode).split(weight, total, max_surge)


def next_replicas(
    total: int, target: Sizing, rollout: Rollout, stable: Track, canary: Track | None, canary_out: bool = False
) -> tuple[int, int]:
    """One move from the tracks' replica counts toward ``target`` (stable, canary), within the
    budget: never more than ``total + maxSurgeReplicas`` pods (counting pods that still run above
    a count just lowered), never fewer than ``total - maxUnavailableReplicas`` ready ones. A track
    is scaled down only as far as the other's ready pods cover, and up only as far as the pods
    still running leave room; each pass moves again as pods become ready or go. ``canary_out``: the
    canary leaves at once (a rollback), and the stable comes back as its pods go."""
    floor = total - rollout.max_unavailable_replicas
    budget = total + rollout.max_surge_replicas
    canary_replicas = canary.replicas if canary is not None else 0
    canary_ready = canary.current_ready if canary is not None else 0
    canary_pods = max(canary.pods, canary_replicas) if canary is not None else 0
    s, c = stable.replicas, 0 if canary_out else canary_replicas
    if s > target.stable:
        s = max(target.stable, min(s, floor - min(canary_ready, c)))
    if c > target.pods:
        c = max(target.pods, min(c, floor - min(stable.ready, s)))
    if s < target.stable:
        s = min(target.stable, max(s, budget - max(c, canary_pods)))
    if c < target.pods:
        c = min(target.pods, max(c, budget - max(s, stable.pods)))
    return s, c


def _iso(value: datetime) -> str:
    return value.replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _plan(
    phase: str,
    summary: Callable[[str, str], list[Cond]],
    reason: str,
    message: str,
    progressing: Status = "True",
    degraded: tuple[str, str] | None = None,
    **kw: Any,
) -> Plan:
    """A plan whose summary, Progressing and Degraded conditions tell the same story."""
    conditions = [
        *summary(reason, message),
        Cond("Progressing", progressing, reason, message),
        Cond("Degraded", "True", *degraded) if degraded else Cond("Degraded", "False", reason, ""),
    ]
    return Plan(phase, conditions, **kw)


def plan(obs: Observed) -> Plan:
    """What to do next, from what is observed."""
    result = _plan_for(obs)
    if result.consumed_annotation is None:
        # A promote, abort or retry with nothing to act on is dropped, not kept for the next revision.
        result.consumed_annotation = next((a for a in MANUAL_ANNOTATIONS if obs.annotations.get(a)), None)
    _size(obs, result)
    return result


def alias_target(obs: Observed, result: Plan) -> tuple[str, str] | None:
    """(model, version) the promote alias names once ``result`` is carried out: the promoted version
    while it bakes or serves; status.previousStable while a promotion is in flight or once one (or
    a bake) is reverted; else what the stable track serves. None: nothing known (no stable yet)."""
    previous = result.status.get("previousStable") or obs.status.get("previousStable") or {}
    if result.revert_stable or result.phase == "Promoting":
        model, version = previous.get("modelName"), previous.get("modelVersion")
    elif result.phase in ("Promoted", "Baking", "Failed") and result.stable is not None:
        model, version = result.stable.model, result.stable.version
    elif obs.stable is not None:
        model, version = obs.stable.model, obs.stable.version
    else:
        return None
    return (str(model), str(version)) if model and version else None


def new_rollback(before: Mapping[str, Any], result: Plan) -> dict[str, Any] | None:
    """The rollback ``result`` records, if it is a new one (not the stored record, nor its retry mark)."""
    record = result.status.get("lastRollback")
    if not record or record.get("retried"):
        return None
    stored = before.get("lastRollback") or {}
    same = all(record.get(k) == stored.get(k) for k in ("revision", "reason", "time"))
    return None if same else dict(record)


def _size(obs: Observed, result: Plan) -> None:
    """The tracks' replica counts for this pass: one move toward the plan's split of spec.replicas
    (see :func:`next_replicas`). Without a canary in the plan, the canary leaves and the stable
    takes all of spec.replicas."""
    total = total_replicas(obs.spec)
    stable = obs.stable
    canary_out = result.canary is None
    target_canary = 0 if canary_out else result.canary_replicas
    target = Sizing(
        target_canary, 0, "", total - target_canary if result.stable_target is None else result.stable_target
    )
    if stable is None:
        result.stable_replicas = target.stable
        return
    canary = obs.canary
    if canary is not None and result.canary is not None and not canary.serves(result.canary):
        canary = replace(canary, ready=0)  # pods of another revision, being replaced: they carry nothing here
    # The canary leaves at once (a rollback), unless the stable has no ready pod to take its traffic
    # (after a 100% step): then the pods move within the budget like any others.
    out = canary_out and stable.ready > 0
    result.stable_replicas, canary_replicas = next_replicas(total, target, obs.spec.rollout, stable, canary, out)
    if not canary_out:
        result.canary_replicas = canary_replicas
    elif not out and canary_replicas and result.canary is None and canary is not None:
        result.canary, result.canary_replicas = _serving(canary), canary_replicas  # kept until the stable serves
        result.weight = result.route_weight = replica_weight(canary.current_ready, stable.ready)  # and it serves
    elif out and canary is not None and (held := held_out(obs, result, canary)) is not None:
        result.canary, result.canary_replicas, result.wake_in = _serving(canary), *held
        result.held_out = True
    rolling = result.revert_stable or (result.stable is not None and not stable.serves(result.stable))
    if rolling:
        result.stable_budget = roll_budget(total, obs.spec.rollout, result.stable_replicas,
                                           max(canary.pods, canary.replicas) if canary is not None else 0)  # fmt: skip


def held_out(obs: Observed, result: Plan, canary: Track) -> tuple[int, float] | None:
    """After a rollback, where traffic follows the router's weights rather than the pods
    (GatewayAPI): the canary's ready pods kept with no traffic for spec.rollout.scaleDownDelaySeconds
    from the rollback, as many as maxSurgeReplicas allows beside the stable's full count; and the
    seconds left. None: they leave now."""
    rollout = obs.spec.rollout
    if result.phase != "RolledBack" or not canary.replicas or not rollout.scale_down_delay_seconds:
        return None
    if not traffic.router(obs.spec.traffic.mode).weights_apart_from_pods:
        return None
    record = result.status.get("lastRollback") or obs.status.get("lastRollback") or {}
    when = parse_time(record.get("time"))
    if when is None or record.get("revision") != canary.revision:
        return None
    left = rollout.scale_down_delay_seconds - (obs.now - when).total_seconds()
    keep = min(canary.replicas, canary.current_ready, rollout.max_surge_replicas)  # ready ones: the rest go
    return (keep, left) if left > 0 and keep > 0 else None


def roll_budget(total: int, rollout: Rollout, stable: int, canary_pods: int) -> tuple[int, int] | None:
    """The stable's (maxSurge, maxUnavailable) while it rolls beside canary pods, so that the
    budget holds: the surge is what spec.replicas + maxSurgeReplicas leaves; with none left, one
    pod at a time is replaced (the canary's pods carry its share meanwhile). None: the spec's."""
    room = total + rollout.max_surge_replicas - stable - canary_pods
    if room >= rollout.max_surge_replicas:
        return None
    surge = max(0, room)
    return surge, rollout.max_unavailable_replicas if surge > 0 else max(1, rollout.max_unavailable_replicas)


def _serving(track: Track) -> Desired:
    return Desired(track.version or "", track.uri or "", track.model or "", track.revision or "")


def _plan_for(obs: Observed) -> Plan:
    desired, stable, status = obs.desired, obs.stable, obs.status
    baking = _bake_in_progress(obs) or _revert_unfinished(obs)
    if baking is not None:
        return baking
    if desired is None:
        message = obs.desired_problem or "the model to serve cannot be resolved"
        if stable is None or stable.revision is None:
            # Nothing served yet: typically the first model is still being trained or validated.
            return _plan("Progressing", reconciling, "WaitingForModel", message)
        phase = status.get("phase") or "Promoted"
        return _plan(phase, stalled, "ModelUnavailable", message, progressing="False",
                     degraded=("ModelUnavailable", message))  # fmt: skip
    if status.get("phase") == "Promoting" and (status.get("canary") or {}).get("revision") == desired.revision:
        return Promotion(obs, desired).plan()
    if stable is None or stable.revision is None:
        return _first(obs, desired)
    if stable.serves(desired):
        return _settled(obs, desired, stable)
    last = status.get("lastRollback") or {}
    if last.get("revision") == desired.revision and not last.get("retried"):
        if obs.annotations.get(RETRY_ANNOTATION):
            retried = Canary(obs, desired, stable).plan()
            retried.status["lastRollback"] = {**last, "retried": True}
            retried.consumed_annotation = RETRY_ANNOTATION
            return retried
        cause = str(last.get("reason"))
        if last.get("metric"):
            cause += f": {last['metric']}={last.get('value')}"
        message = (
            f"{_name(desired)} was rolled back ({cause}); stable serves {_name_of(stable)}; publish a new "
            f"version, change the spec, or annotate {RETRY_ANNOTATION}=true to try it again"
        )
        return _plan("RolledBack", stalled, "RolledBack", message, progressing="False",
                     degraded=("RolledBack", message), status=_health_status(obs))  # fmt: skip
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
    served = desired if desired is not None and stable.serves(desired) else _serving(stable)
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
    message = (f"reverting the stable track to {previous.get('modelName')} version {previous.get('modelVersion')} "
               f"(revision {previous['revision']}) after {reason}: it still serves {_name_of(stable)}")  # fmt: skip
    return _plan("RolledBack", stalled, reason, message, progressing="False", degraded=(reason, message),
                 revert_stable=True)  # fmt: skip


def _name(desired: Desired) -> str:
    return f"{desired.model} version {desired.version} (revision {desired.revision})"


def _name_of(track: Track) -> str:
    return f"{track.model or '?'} version {track.version} (revision {track.revision})"


def _health_status(obs: Observed) -> dict[str, Any]:
    return {"lastProgressTime": obs.status.get("lastProgressTime") or _iso(obs.now)}


def _first(obs: Observed, desired: Desired) -> Plan:
    """No stable yet: the first revision goes to the stable track directly (nothing to compare it with)."""
    served = obs.status.get("stable") or {}
    if served.get("revision") and served.get("revision") != desired.revision and served.get("uri"):
        # The stable Deployment is gone while a new revision is pending: bring back what was served,
        # never the unanalysed new revision.
        restored = Desired(str(served.get("modelVersion")), str(served["uri"]), str(served.get("modelName") or ""),
                           str(served["revision"]))  # fmt: skip
        message = f"restoring the stable track ({_name(restored)}) before any canary"
        return _plan("Progressing", reconciling, "RestoringStable", message, stable=restored)
    message = f"rolling out {_name(desired)} on the stable track"
    return _plan("Progressing", reconciling, "RollingOut", message, stable=desired,
                 status={"lastProgressTime": _iso(obs.now)})  # fmt: skip


def _settled(obs: Observed, desired: Desired, stable: Track) -> Plan:
    """The stable serves the desired revision: Ready when every desired replica is available,
    Degraded while some are not, Stalled when that lasts longer than progressDeadlineSeconds."""
    previous = obs.status
    cleared = {"currentStep": None, "stepStartTime": None, "canaryStartTime": None, "failedAnalyses": None,
               "previousStable": None, "lastProgressTime": None, "bakeStartTime": None}  # fmt: skip
    if not stable.complete:
        if previous.get("phase") == "Progressing" or not stable.generation_observed or stable.updated < stable.replicas:
            message = f"rolling out {_name(desired)}: {stable.ready}/{stable.replicas} replicas ready"
            return _plan("Progressing", reconciling, "RollingOut", message, stable=desired)
        return _degraded(obs, desired, stable)
    message = f"serving {_name(desired)} ({stable.ready}/{stable.replicas} replicas ready)"
    newly = (previous.get("phase") not in ("Promoted", "Baking")
             or (previous.get("stable") or {}).get("revision") != desired.revision)  # fmt: skip
    alias = obs.spec.rollout.promote_alias
    registry = [_set_alias(desired, alias)] if newly and alias else []
    if obs.spec.rollout.bake is not None and previous.get("phase") == "Promoting" and previous.get("previousStable"):
        # Promoted: the alias moves now; the new stable is watched for spec.rollout.bake.duration.
        started = {"bakeStartTime": _iso(obs.now), "failedAnalyses": 0, "analysis": None, "currentStep": None,
                   "stepStartTime": None, "canaryStartTime": None, "lastProgressTime": None}  # fmt: skip
        baking = Baking(replace(obs, status={**obs.status, **started}), desired, stable).plan()
        baking.registry, baking.durable = registry, True
        baking.status = {**started, **baking.status}
        return baking
    return _plan("Promoted", ready, "Promoted", message, progressing="False", stable=desired, registry=registry,
                 durable=bool(registry), status=cleared)  # fmt: skip


def _degraded(obs: Observed, desired: Desired, stable: Track) -> Plan:
    detail = f"; {stable.problem[0]}: {stable.problem[1]}" if stable.problem else ""
    message = f"{stable.ready}/{stable.replicas} stable replicas ready{detail}"
    since = parse_time((get_condition(obs.status.get("conditions"), "Degraded") or {}).get("lastTransitionTime"))
    was_degraded = (get_condition(obs.status.get("conditions"), "Degraded") or {}).get("status") == "True"
    deadline = timedelta(seconds=obs.spec.rollout.progress_deadline_seconds)
    if was_degraded and since is not None and obs.now - since > deadline:
        return _plan("Failed", stalled, "StableUnavailable", f"{message} for more than "
                     f"spec.rollout.progressDeadlineSeconds={deadline.seconds}", progressing="False",
                     degraded=("StableUnavailable", message), stable=desired)  # fmt: skip
    return _plan("Promoted", reconciling, "StableUnavailable", message, progressing="False",
                 degraded=("StableUnavailable", message), stable=desired)  # fmt: skip


def _set_alias(desired: Desired, alias: str) -> dict[str, Any]:
    return {"action": "SetAlias", "model": desired.model, "version": desired.version, "alias": alias}


def _rollback_record(
    desired: Desired, reason: RollbackReason, now: datetime, metric: str | None, value: float | None
) -> dict[str, Any]:
    record: dict[str, Any] = {"reason": reason, "modelName": desired.model, "modelVersion": desired.version,
                              "revision": desired.revision, "time": _iso(now)}  # fmt: skip
    if metric is not None:
        record["metric"] = metric
    if value is not None and math.isfinite(value):
        record["value"] = float(f"{value:.6g}")
    return record


def _rollback_tag(desired: Desired, record: Mapping[str, Any]) -> dict[str, Any]:
    detail = ", ".join(f"{k}={v}" for k, v in record.items() if k not in ("modelName", "modelVersion"))
    return {"action": "SetTag", "model": desired.model, "version": desired.version, "key": ROLLBACK_TAG,
            "value": detail}  # fmt: skip


COST_TAGS = {"perHour": "slipway.cost.servingPerHour", "per1kRequests": "slipway.cost.per1kRequests",
             "perMillionTokens": "slipway.cost.perMillionTokens", "currency": "slipway.cost.currency"}  # fmt: skip


def _cost_tags(desired: Desired, spent: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The canary's serving cost (its last analysis) as tags on the promoted version: the registry
    shows what each production version cost to serve."""
    tag = {"action": "SetTag", "model": desired.model, "version": desired.version}
    return [
        {**tag, "key": key, "value": str(spent[name])} for name, key in COST_TAGS.items() if spent.get(name) is not None
    ]


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
        fields: dict[str, Any] = {"currentStep": self.step, "stepStartTime": _iso(self.step_started),
                                  "canaryStartTime": _iso(self.started), "failedAnalyses": self.failed,
                                  "lastProgressTime": _iso(self.progress)}  # fmt: skip
        if not self.same:
            fields["analysis"] = None  # a new canary starts without the last one's results
        return {**fields, **changes}

    def serve(self, sizing: Sizing, canary_ready: int) -> dict[str, Any]:
        weight = self.weights[self.step]
        real = traffic.router(self.spec.traffic.mode).carried(sizing, weight, canary_ready, self.stable.ready)
        return {"canary": self.desired, "canary_replicas": sizing.pods, "stable_target": sizing.stable,
                "weight": real, "requested_weight": weight, "route_weight": real, "rollout": self.desired}  # fmt: skip

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
            return _plan("Paused", held, "Paused", message, progressing="Unknown", status=self.status(), **serve)
        if self.held_on_failure():
            return self.hold_on_failure(step_text, serve)
        if sizing.pods == 0:
            message = f"holding {step_text}: {sizing.note}"
            return _plan("Paused", stalled, "NoRoomForCanary", message, progressing="Unknown",
                         status=self.status(stepStartTime=None), **serve)  # fmt: skip
        # A step whose pods were all ready goes on while spec.replicas changes (the HPA): the split
        # follows the new total and the step's clock keeps running.
        if canary_ready < sizing.pods and not (self.step_reached and canary_ready > 0):
            return self.starting(canary_ready, sizing, serve)
        return self.analysing(step_text, sizing, serve)

    def sizing(self) -> Sizing:
        return canary_sizing(self.spec.traffic.mode, self.weights[self.step], total_replicas(self.spec),
                             self.spec.rollout.max_surge_replicas)  # fmt: skip

    def starting(self, canary_ready: int, sizing: Sizing, serve: dict[str, Any]) -> Plan:
        deadline = self.spec.rollout.progress_deadline_seconds
        if self.now - self.progress > timedelta(seconds=deadline):
            problem = self.obs.canary.problem if self.obs.canary else None
            why = f" ({problem[0]}: {problem[1]})" if problem else ""
            message = f"no canary progress for spec.rollout.progressDeadlineSeconds={deadline}{why}"
            return self.rollback("ProgressDeadlineExceeded", message)
        message = f"starting canary {_name(self.desired)}: {canary_ready}/{sizing.pods} pods ready"
        problem = self.obs.canary.problem if self.obs.canary else None
        if problem and problem[0] == "Unschedulable":
            message = f"{message}; the canary cannot be scheduled: {problem[1]}"
            return _plan("Progressing", stalled, "CanaryUnschedulable", message,
                         status=self.status(stepStartTime=None), **serve)  # fmt: skip
        if problem:
            message = f"{message}; {problem[0]}: {problem[1]}"
        return _plan("Progressing", reconciling, "CanaryStarting", message, status=self.status(stepStartTime=None),
                     **serve)  # fmt: skip

    def analysing(self, step_text: str, sizing: Sizing, serve: dict[str, Any]) -> Plan:
        analysis = self.spec.rollout.analysis
        verdict, changes = "Passed", dict[str, Any]()
        if analysis is not None:
            result = self.obs.analysis
            if result is None:
                if self.analysis_due():
                    return _plan("Analyzing", reconciling, "Analyzing", f"analysing the canary at {step_text}",
                                 analyze=True, status=self.status(), **serve)  # fmt: skip
                deciding = [r.get("result") for r in self.previous_results if not r.get("dryRun")]
                verdict = _combined(deciding) if deciding or not self.previous_results else "Passed"
            else:
                verdict, changes = result.verdict, {"analysis": result.to_status()}
                if verdict == "Failed":
                    self.failed += 1
                    if self.failed > analysis.failure_limit and self.spec.rollout.on_failure == "Pause":
                        return self.hold_on_failure(step_text, serve, result.reason, **changes)
                    if self.failed > analysis.failure_limit:
                        return self.rollback("AnalysisFailed", result.reason, result.metric, result.value, **changes)
        if verdict == "Inconclusive":
            message = (
                f"holding {step_text}: analysis inconclusive ({self.inconclusive_reason()}); never promoting blind"
            )
            return _plan("Paused", reconciling, "AnalysisInconclusive", message, progressing="Unknown",
                         status=self.status(**changes), next_analysis=self.seconds_to_analysis(changes),
                         **serve)  # fmt: skip
        next_analysis = self.seconds_to_analysis(changes)
        if verdict == "Passed" and self.now - self.step_started >= step_duration(self.spec.rollout, self.step):
            if self.step + 1 >= len(self.weights):
                return self.promote(**changes)
            self.step, self.step_started = self.step + 1, self.now
            sizing = self.sizing()
            serve = {**serve, "canary_replicas": sizing.pods, "stable_target": sizing.stable,
                     "requested_weight": self.weights[self.step]}  # fmt: skip
            next_analysis = None  # the next step's pods start first
            changes["stepStartTime"] = None  # its pause counts from when they are ready
        failures = f", {self.failed} failed analyses" if self.failed else ""
        message = f"canary {_name(self.desired)} at {step_text}{failures}"
        return _plan("Analyzing", reconciling, "Analyzing", message, status=self.status(**changes),
                     next_analysis=next_analysis, **serve)  # fmt: skip

    def held_on_failure(self) -> bool:
        """spec.rollout.onFailure=Pause and more failed analyses than failureLimit: held for a person."""
        analysis = self.spec.rollout.analysis
        return (self.spec.rollout.on_failure == "Pause" and analysis is not None
                and self.failed > analysis.failure_limit)  # fmt: skip

    def hold_on_failure(self, step_text: str, serve: dict[str, Any], why: str | None = None, **changes: Any) -> Plan:
        """The canary keeps its step and its traffic, is analysed no more and never times out, until
        ``kubectl slipway promote`` or ``abort`` (the annotations, handled before this)."""
        self.progress = self.now
        if why is None:
            failed = [r for r in self.previous_results or (self.obs.status.get("analysis") or [])
                      if r.get("result") == "Failed" and not r.get("dryRun")]  # fmt: skip
            why = str(failed[0].get("message")) if failed else "analysis failed"
        message = (f"held at {step_text} after {self.failed} failed analyses ({why}); spec.rollout.onFailure=Pause: "
                   f"`kubectl slipway promote` or `kubectl slipway abort` decides")  # fmt: skip
        return _plan("Paused", stalled, "AnalysisFailed", message, progressing="Unknown",
                     degraded=("AnalysisFailed", message), status=self.status(**changes), **serve)  # fmt: skip

    def seconds_to_analysis(self, changes: Mapping[str, Any]) -> float | None:
        """For the pass's requeue: when the next analysis is due, after this pass's (in
        ``changes``) or the recorded one; None without analysis."""
        if self.spec.rollout.analysis is None:
            return None
        return max(0.0, self.next_analysis(changes.get("analysis")).total_seconds())

    def analysis_due(self) -> bool:
        return self.next_analysis() <= timedelta(0)

    def next_analysis(self, latest: list[dict[str, Any]] | None = None) -> timedelta:
        """How long until the next analysis is due, after the ``latest`` one (else the recorded
        ones). Every ``analysis.interval``; sooner early in the step (its first interval, or
        :data:`INCONCLUSIVE_WINDOW` if longer) while the latest analysis was inconclusive: a canary's
        first query usually comes before Prometheus holds two samples of its pods, and waiting a
        whole interval for the next one would delay every verdict by that much. It is tried again
        after :data:`INCONCLUSIVE_RETRY` instead (no data never counts towards ``failureLimit``, so
        this never rolls back sooner on no data). Past that, a canary with no data is queried once
        per interval, as any other."""
        analysis = self.spec.rollout.analysis
        assert analysis is not None
        timed = [(t, r) for r in (self.previous_results if latest is None else latest)
                 if (t := parse_time(r.get("time"))) is not None]  # fmt: skip
        if not timed:
            return timedelta(0)
        last = max(t for t, _ in timed)
        interval = parse_duration(analysis.interval)
        latest_deciding = [r for t, r in timed if t == last and not r.get("dryRun")]
        inconclusive = bool(latest_deciding) and all(r.get("result") == "Inconclusive" for r in latest_deciding)
        if inconclusive and self.now - self.step_started < max(interval, INCONCLUSIVE_WINDOW):
            interval = min(interval, INCONCLUSIVE_RETRY)
        return last + interval - self.now

    def inconclusive_reason(self) -> str:
        results = self.obs.analysis.to_status() if self.obs.analysis else self.previous_results
        reasons = [str(r.get("message") or f"{r.get('metric')}: no data") for r in results
                   if r.get("result") == "Inconclusive" and not r.get("dryRun")]  # fmt: skip
        if not reasons and self.obs.analysis and self.obs.analysis.reason:
            reasons = [self.obs.analysis.reason]
        return "; ".join(reasons) or "no analysis yet"

    def promote(self, **changes: Any) -> Plan:
        """Every step passed (or slipway.dev/promote): the decision is written first, then the
        stable is rolled while the canary's pods keep serving, under watch (see Promotion)."""
        previous = {"revision": self.stable.revision, "modelName": self.stable.model,
                    "modelVersion": self.stable.version, "uri": self.stable.uri}  # fmt: skip
        self.progress = self.now
        canary = self.obs.canary
        hold: dict[str, Any] = {"stable_target": self.stable.replicas}
        if canary is not None and canary.serves(self.desired):
            hold.update(canary=self.desired, canary_replicas=canary.replicas)  # nothing moves until the stable rolls
            share = replica_weight(canary.current_ready, self.stable.ready)
            hold.update(weight=share, route_weight=share)
        message = f"promoting {_name(self.desired)}: rolling the stable track, then moving the canary's pods to it"
        measured = self.obs.analysis.costs.get("canary") if self.obs.analysis is not None else None
        spent = measured or (self.obs.status.get("canary") or {}).get("cost") or {}
        return _plan("Promoting", reconciling, "Promoting", message, rollout=self.desired, durable=True,
                     registry=_cost_tags(self.desired, spent),
                     status=self.status(previousStable=previous, **changes), **hold)  # fmt: skip

    def rollback(
        self, reason: RollbackReason, message: str, metric: str | None = None, value: float | None = None,
        **changes: Any,
    ) -> Plan:  # fmt: skip
        record = _rollback_record(self.desired, reason, self.now, metric, value)
        text = f"rolled back {_name(self.desired)}: {message}; stable keeps serving {_name_of(self.stable)}"
        return _plan("RolledBack", stalled, reason, text, progressing="False", degraded=(reason, text),
                     rollout=self.desired, registry=[_rollback_tag(self.desired, record)], durable=True,
                     status=self.status(lastRollback=record, **changes))  # fmt: skip


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
        total = total_replicas(self.obs.spec)
        serving = canary is not None and canary.serves(self.desired)
        canary_replicas = canary.replicas if canary is not None and serving else 0
        canary_pods = canary.pods if canary is not None else 0
        hold: dict[str, Any] = {"canary": self.desired, "canary_replicas": canary_replicas} if serving else {}
        canary_ready = canary.current_ready if canary is not None and serving else 0
        if serving:  # both tracks serve while the stable rolls: traffic in proportion to ready pods
            share = replica_weight(canary_ready, stable.ready if stable is not None else 0)
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
            step = (f"moving the canary's {canary_pods} pods to the stable track "
                    f"({stable.ready}/{total} ready{problem})")  # fmt: skip
            if serving:
                hold.update(canary_replicas=0, stable_target=total)
        else:
            return _settled(self.obs, self.desired, stable)
        if self.now - self.progress > self.deadline:
            why = f"; {stable.problem[0]}: {stable.problem[1]}" if stable and stable.problem else ""
            return self.revert("PromotionFailed", f"the stable track made no progress for "
                               f"spec.rollout.progressDeadlineSeconds={self.deadline.seconds}{why}")  # fmt: skip
        message = f"promoting {_name(self.desired)}: {step}"
        return _plan("Promoting", reconciling, "Promoting", message, rollout=self.desired, stable=self.desired,
                     status={"lastProgressTime": _iso(self.progress)}, **hold)  # fmt: skip

    def revert(self, reason: RollbackReason, message: str) -> Plan:
        record = _rollback_record(self.desired, reason, self.now, None, None)
        text = f"reverted the promotion of {_name(self.desired)}: {message}; the stable track is restored to " \
               f"{self.previous.get('modelName')} version {self.previous.get('modelVersion')} " \
               f"(revision {self.previous.get('revision')})"  # fmt: skip
        return _plan("RolledBack", stalled, reason, text, progressing="False", degraded=(reason, text),
                     revert_stable=True, rollout=self.desired, registry=[_rollback_tag(self.desired, record)],
                     durable=True, status={"lastRollback": record, "lastProgressTime": None})  # fmt: skip


def rolled(stable: Track) -> bool:
    """The stable's roll is over: every pod runs the current template and one is ready (or none is
    asked for). Growing it afterwards (a promotion moving the canary's pods) is no roll."""
    return (stable.generation_observed and stable.pods <= stable.updated
            and stable.current_ready >= min(stable.replicas, 1))  # fmt: skip


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
        verdict = _combined([r.get("result") for r in latest]) if self.settings is not None else "Passed"
        if self.now - self.started >= self.duration and verdict != "Failed":
            finished = _settled(replace(self.obs, status={**self.obs.status, "phase": "Baking"}), self.desired,
                                self.stable)  # fmt: skip
            finished.status = {**finished.status, "bakeStartTime": None, **self.changes, "failedAnalyses": None}
            return finished
        return None

    def hold(self) -> Plan:
        changes = self.changes
        due = self.settings is not None and self.obs.analysis is None and self.next_analysis() <= 0
        left = max(0, int((self.duration - (self.now - self.started)).total_seconds()))
        failures = f", {self.failed} failed analyses" if self.failed else ""
        message = f"baking {_name(self.desired)}: {left}s of spec.rollout.bake.duration left{failures}"
        if self.waiting is not None:
            message += (f"; {_name(self.waiting)} waits until the bake is over "
                        f"(annotate {ABORT_ANNOTATION}=true to revert now and roll it out)")  # fmt: skip
        next_analysis = None if self.settings is None else max(0.0, self.next_analysis(changes))
        return _plan("Baking", reconciling, "Baking", message, progressing="True", stable=self.desired,
                     rollout=self.desired, analyze=due, analyze_track="stable", status=changes,
                     next_analysis=next_analysis)  # fmt: skip

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
        record = _rollback_record(self.desired, reason, self.now, metric, value)
        before = f"{self.previous.get('modelName')} version {self.previous.get('modelVersion')}"
        text = (f"reverted {_name(self.desired)} during its bake ({cause}); the stable track is restored to {before} "
                f"(revision {self.previous.get('revision')})")  # fmt: skip
        registry = [_rollback_tag(self.desired, record)]
        alias = self.obs.spec.rollout.promote_alias
        if alias and self.previous.get("modelVersion") and self.previous.get("modelName") == self.desired.model:
            registry.append({"action": "SetAlias", "model": self.desired.model,
                             "version": str(self.previous["modelVersion"]), "alias": alias})  # fmt: skip
        status = {**changes, "lastRollback": record, "bakeStartTime": None, "lastProgressTime": None}
        return _plan("RolledBack", stalled, reason, text, progressing="False", degraded=(reason, text),
                     revert_stable=True, rollout=self.desired, registry=registry, durable=True,
                     status=status)  # fmt: skip


def _combined(results: list[str | None]) -> str:
    """The verdict of the latest analysis: any Failed fails, any Inconclusive holds, none yet holds."""
    if "Failed" in results:
        return "Failed"
    if "Inconclusive" in results or not results:
        return "Inconclusive"
    return "Passed"


def track_of(deployment: Mapping[str, Any] | None, problem: tuple[str, str] | None = None) -> Track | None:
    """A track as observed from its Deployment (and the first problem its pods report)."""
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
        problem = (str(failure.get("reason") or "FailedCreate"), str(failure.get("message") or "")[:500])
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


def track_statuses(decision: Plan, stable: Track | None, canary: Track | None) -> tuple[TrackStatus, TrackStatus]:
    """status.stable and status.canary: what each track serves, its pods and its share of traffic."""

    def of(track: Track | None, weight: int) -> TrackStatus:
        if track is None:
            return TrackStatus(replicas=0, ready_replicas=0, weight=0)
        return TrackStatus(revision=track.revision, model_name=track.model or None, model_version=track.version or None,
                           uri=track.uri or None, replicas=track.replicas, ready_replicas=track.ready,
                           weight=weight)  # fmt: skip

    canary_status = of(canary, decision.weight)
    if decision.rollout is not None:
        canary_status = canary_status.model_copy(update={"revision": decision.rollout.revision,
                                                         "model_name": decision.rollout.model,
                                                         "model_version": decision.rollout.version,
                                                         "uri": decision.rollout.uri})  # fmt: skip
    elif canary is None or not canary.replicas:
        canary_status = canary_status.model_copy(update={"revision": None, "model_name": None, "model_version": None})
    canary_status.requested_weight = decision.requested_weight
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
    return Desired(str(version), f"models:/{model}/{version}", model), ""


def with_revision(desired: Desired, revision: str) -> Desired:
    return replace(desired, revision=revision)
