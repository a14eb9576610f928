"""The rollout state machine: revisions, honest weights, deadlines that measure progress, guarded
promotion, durable decisions, Ready that means every replica, manual control (pure)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from slipway import kinds
from slipway.inference import traffic
from slipway.inference.analysis import AnalysisOutcome, Measurement, MetricResult, evaluate_metric
from slipway.inference.model import AnalysisMetric, InferenceDeploymentSpec
from slipway.inference.rollout.base import Desired, Observed, Track
from slipway.inference.rollout.budget import next_replicas
from slipway.inference.rollout.cadence import INCONCLUSIVE_RETRY
from slipway.inference.rollout.canary import step_weights
from slipway.inference.rollout.planner import plan
from slipway.inference.rollout.records import ROLLBACK_TAG, alias_target, new_rollback
from slipway.inference.rollout.tracks import desired_from_artifact, track_of, track_statuses
from slipway.inference.traffic import Sizing, replica_weight

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
V1 = Desired("1", "models:/m/1", "m", "rev1")
V2 = Desired("2", "models:/m/2", "m", "rev2")


def iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def outcome(result: str, value: float | None = None, message: str = "") -> AnalysisOutcome:
    """One errorRate analysis with this result."""
    return AnalysisOutcome((MetricResult("errorRate", "q", value, "<= 0.05", result, iso(NOW), message),))  # type: ignore[arg-type]


def spec(traffic: dict[str, Any] | None = None, **rollout: Any) -> InferenceDeploymentSpec:
    body: dict[str, Any] = {
        "model": {"name": "m", "alias": "candidate"},
        "image": "i",
        "autoscaling": {"minReplicas": 2, "maxReplicas": 4},
        "rollout": {"steps": [{"weight": 20}, {"weight": 50}], "interval": "30s", **rollout},
    }
    if traffic:
        body["traffic"] = traffic
    return InferenceDeploymentSpec.model_validate(body)


def track(d: Desired, ready: int = 2, replicas: int | None = None, **kw: Any) -> Track:
    replicas = ready if replicas is None else replicas
    kw.setdefault("pods", max(ready, replicas))
    return Track(d.version, d.uri, replicas, ready, kw.pop("updated", replicas), kw.pop("observed", True),
                 revision=d.revision, model=d.model, available=kw.pop("available", ready), **kw)  # fmt: skip


def observe(s: InferenceDeploymentSpec, desired=V2, stable=None, canary=None, status=None, annotations=None, now=NOW,
            analysis=None) -> Observed:  # fmt: skip
    router = traffic.router(s.traffic.mode)
    return Observed(s, desired, None, stable, canary, status or {}, annotations or {}, now, analysis, router=router)


def cond(p, type_: str):
    return next(c for c in p.conditions if c.type == type_)


def canary_status(step: int = 0, since: datetime = NOW, progress: datetime | None = None, **more: Any) -> dict:
    return {"phase": "Analyzing", "canary": {"revision": V2.revision, "modelVersion": "2"}, "currentStep": step,
            "stepStartTime": iso(since), "canaryStartTime": iso(since), "lastProgressTime": iso(progress or since),
            **more}  # fmt: skip


# -- weights ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "total", "weight", "surge", "canary", "stable", "share", "note"),
    [
        ("Replicas", 2, 10, 1, 1, 2, 33, "floor"),  # one pod is the floor (1 of 3 beats 1 of 2), and it is said
        ("Replicas", 2, 50, 1, 1, 1, 50, ""),  # taken from the total: 1 of 2
        ("Replicas", 6, 33, 2, 2, 4, 33, ""),  # the steps the surge share never reached: 2 of 6, 4 of 6
        ("Replicas", 6, 66, 2, 4, 2, 67, ""),
        ("Replicas", 6, 66, 0, 4, 2, 67, ""),  # no spare GPU needed
        ("Replicas", 10, 10, 3, 1, 9, 10, ""),
        ("Replicas", 10, 55, 0, 5, 5, 50, "nearest split"),  # 5 or 6 of 10: 50% is nearer
        ("Replicas", 3, 10, 0, 1, 2, 33, "floor"),
        ("Replicas", 1, 20, 1, 1, 1, 50, "floor"),  # the defaults: 1 replica, surge 1
        ("Replicas", 1, 20, 0, 0, 1, 0, "no room for a canary pod"),  # 1 replica and no surge: held, said why
        ("Replicas", 4, 100, 1, 4, 0, 100, ""),  # a 100% step: all on the canary
        ("GatewayAPI", 2, 25, 1, 1, 1, 25, ""),  # the route carries the exact weight, 1 of 2 pods carries it
        ("GatewayAPI", 10, 25, 1, 3, 7, 25, ""),  # the fewest pods that carry 25%
        ("GatewayAPI", 2, 75, 1, 2, 1, 66, "capped"),  # 2 of 3 pods carry at most 66%
    ],
)
def test_canary_sizing(mode, total, weight, surge, canary, stable, share, note):
    sizing = traffic.router(mode).split(weight, total, surge)
    assert (sizing.pods, sizing.stable, sizing.share) == (canary, stable, share)
    assert note in sizing.note if note else sizing.note == ""
    if sizing.pods:
        assert total <= sizing.pods + sizing.stable <= total + surge  # capacity kept, the GPU budget holds


@pytest.mark.parametrize("surge", [0, 1, 2, 5])
@pytest.mark.parametrize("unavailable", [0, 1, 2])
@pytest.mark.parametrize("total", [1, 2, 6, 9])
@pytest.mark.parametrize("weights", [(33, 66), (10, 50, 90), (25, 100)])
def test_moving_between_splits_keeps_the_budget_and_the_floor_and_always_arrives(surge, unavailable, total, weights):
    """Pods start and stop one pass at a time (the worst case for the budget): every step's split is
    reached, then the stable takes everything back (a promotion or rollback), never more than
    total + surge pods running and never fewer than total - unavailable ready."""
    if surge + unavailable == 0:
        return  # refused at admission (BUDGET_MESSAGE)
    rollout = spec(maxSurgeReplicas=surge, maxUnavailableReplicas=unavailable).rollout
    s, c, s_pods, c_pods, s_ready, c_ready = total, 0, total, 0, total, 0
    targets = [traffic.router("Replicas").split(w, total, surge) for w in weights] + [Sizing(0, 0, "", total)]
    for target in targets:
        if target.pods == 0 and target.stable != total:
            continue  # no room (held, tested above)
        for _ in range(50):
            stable = Track("1", "u", s, s_ready, s, True, s_pods)
            canary = Track("2", "u", c, c_ready, c, True, c_pods)
            s, c = next_replicas(total, target, rollout, stable, canary)
            # The pass's writes land: pods above a lowered count go at once, new pods start unready.
            s_pods, c_pods = min(s_pods, s), min(c_pods, c)
            s_ready, c_ready = min(s_ready, s), min(c_ready, c)
            assert s_pods + c_pods + (s - s_pods) + (c - c_pods) <= total + surge
            assert s_ready + c_ready >= total - unavailable
            # Then the new pods run and become ready.
            s_pods, c_pods, s_ready, c_ready = s, c, s, c
            if (s, c) == (target.stable, target.pods):
                break
        assert (s, c) == (target.stable, target.pods), (target, s, c)


def test_step_weights_and_replica_weight():
    assert step_weights(spec().rollout) == [20, 50]
    assert step_weights(spec(steps=None, stepWeight=10, maxWeight=30).rollout) == [10, 20, 30]
    assert replica_weight(1, 2) == 33


def test_the_weight_reported_is_the_real_share_beside_the_requested_one():
    s = spec(steps=[{"weight": 10}, {"weight": 50}])
    p = plan(observe(s, stable=track(V1), canary=track(V2, 1), status=canary_status()))
    assert (p.canary_replicas, p.weight, p.requested_weight) == (1, 33, 10)
    assert "one canary pod is the floor" in cond(p, "Ready").message


def test_a_steps_pause_counts_from_when_its_canary_pods_are_ready_not_from_the_step_start():
    s = spec(steps=[{"weight": 10, "pause": "10s"}, {"weight": 50, "pause": "10s"}])
    long_ago = NOW - timedelta(minutes=5)
    # Step 1 began 5 minutes ago but its canary pod is still starting: the clock does not run.
    starting = plan(observe(s, stable=track(V1), canary=track(V2, 0, 1), status=canary_status(since=long_ago)))
    assert starting.phase == "Progressing" and starting.status["stepStartTime"] is None
    held = {**canary_status(since=long_ago), "stepStartTime": None}
    ready = plan(observe(s, stable=track(V1), canary=track(V2, 1), status=held))
    assert (ready.phase, ready.status["currentStep"], ready.status["stepStartTime"]) == ("Analyzing", 0, iso(NOW))
    # Ten seconds at the step's weight: now it advances.
    later = plan(observe(s, stable=track(V1), canary=track(V2, 1), status=canary_status(since=NOW),
                         now=NOW + timedelta(seconds=10)))  # fmt: skip
    assert later.status["currentStep"] == 1


def test_a_gateway_route_keeps_the_ready_canary_pods_share_while_the_next_steps_pods_start():
    s = spec(traffic={"mode": "GatewayAPI", "parentRefs": [{"name": "web"}]}, maxSurgeReplicas=2,
             steps=[{"weight": 25}, {"weight": 75}])  # fmt: skip
    # Step 2 wants 3 canary pods of 4 (2 replicas + 2 surge); 1 is ready: the route keeps what 1 pod
    # carries beside the 2 stable ones (1 of 3), never 0.
    just_advanced = canary_status(step=1, stepStartTime=None)
    p = plan(observe(s, stable=track(V1), canary=track(V2, 1, 3), status=just_advanced))
    assert (p.phase, p.canary_replicas, p.route_weight, p.requested_weight) == ("Progressing", 3, 33, 75)
    assert p.stable_replicas == 1  # one stable pod's traffic is covered by the ready canary pod
    none_ready = plan(observe(s, stable=track(V1), canary=track(V2, 0, 1), status=canary_status()))
    assert none_ready.route_weight == 0


# -- revisions ----------------------------------------------------------------------------------


def test_first_revision_goes_straight_to_stable_then_promoted_with_the_alias_on_record():
    rolling = plan(observe(spec(), desired=V1))
    assert (rolling.phase, rolling.stable, rolling.canary) == ("Progressing", V1, None)
    done = plan(observe(spec(), desired=V1, stable=track(V1)))
    assert done.phase == "Promoted" and cond(done, "Ready").status == "True"
    assert done.registry == [{"action": "SetAlias", "model": "m", "version": "1", "alias": "production"}]
    assert done.durable
    again = plan(observe(spec(), desired=V1, stable=track(V1),
                         status={"phase": "Promoted", "stable": {"revision": "rev1"}}))  # fmt: skip
    assert again.registry == []


def test_promote_alias_is_configurable_and_empty_moves_none():
    staging = plan(observe(spec(promoteAlias="staging"), desired=V1, stable=track(V1)))
    assert staging.registry[0]["alias"] == "staging"
    assert plan(observe(spec(promoteAlias=""), desired=V1, stable=track(V1))).registry == []


@pytest.mark.parametrize(
    "new",
    [replace(V1, revision="rev1-new-image"), Desired("1", "models:/other/1", "other", "rev-other-1")],
    ids=["image-change-same-version", "other-model-same-version"],
)
def test_any_new_revision_is_canaried(new):
    p = plan(observe(spec(), desired=new, stable=track(V1)))
    assert (p.phase, p.canary, p.canary_replicas, p.stable) == ("Progressing", new, 1, None)


def test_a_new_canary_starts_without_the_previous_analysis():
    status = canary_status(analysis=[{"metric": "errorRate", "result": "Passed", "time": iso(NOW)}])
    status["canary"] = {"revision": "rev-older"}
    p = plan(observe(spec(), stable=track(V1), canary=track(V2, 1), status=status))
    assert p.status["analysis"] is None and p.status["currentStep"] == 0


# -- steps and analysis -------------------------------------------------------------------------


def test_ready_canary_is_analysed_then_holds_its_step_until_the_interval():
    s = spec(analysis={"metrics": [{"name": "errorRate", "max": 0.05}]})
    first = plan(observe(s, stable=track(V1), canary=track(V2, 1), status=canary_status()))
    assert first.analyze
    held = plan(
        observe(s, stable=track(V1), canary=track(V2, 1), status=canary_status(), analysis=outcome("Passed", 0))
    )
    assert (held.phase, held.status["currentStep"], held.weight) == ("Analyzing", 0, 33)
    later = NOW + timedelta(seconds=31)
    passed = outcome("Passed", 0)
    moved = plan(observe(s, stable=track(V1), canary=track(V2, 1), status=canary_status(), analysis=passed, now=later))
    assert moved.status["currentStep"] == 1


def test_failed_analyses_beyond_the_limit_roll_back_on_record_first():
    s = spec(analysis={"failureLimit": 1, "metrics": [{"name": "errorRate", "max": 0.05}]})
    failed = outcome("Failed", 0.31, "errorRate 0.31 > 0.05")
    within = plan(observe(s, stable=track(V1), canary=track(V2, 1), status=canary_status(), analysis=failed))
    assert (within.phase, within.status["failedAnalyses"]) == ("Analyzing", 1)
    p = plan(observe(s, stable=track(V1), canary=track(V2, 1), status=canary_status(failedAnalyses=1), analysis=failed))
    assert p.phase == "RolledBack" and p.durable
    assert p.canary is None and p.stable is None
    record = p.status["lastRollback"]
    assert (record["reason"], record["metric"], record["value"], record["revision"]) == ("AnalysisFailed", "errorRate",
                                                                                          0.31, "rev2")  # fmt: skip
    assert p.registry[0]["action"] == "SetTag" and p.registry[0]["key"] == ROLLBACK_TAG
    assert p.status["analysis"][0]["result"] == "Failed"  # the deciding analysis is on record too
    assert "errorRate 0.31 > 0.05" in cond(p, "Ready").message


def test_on_failure_pause_holds_the_step_without_analysing_until_promote_or_abort():
    s = spec(onFailure="Pause", analysis={"failureLimit": 0, "metrics": [{"name": "errorRate", "max": 0.05}]})
    failed = outcome("Failed", 0.31, "errorRate 0.31 > 0.05")
    p = plan(observe(s, stable=track(V1), canary=track(V2, 1), status=canary_status(), analysis=failed))
    assert (p.phase, cond(p, "Ready").reason, cond(p, "Stalled").status) == ("Paused", "AnalysisFailed", "True")
    assert "errorRate 0.31 > 0.05" in cond(p, "Ready").message and "kubectl slipway promote" in cond(p, "Ready").message
    assert not p.durable and "lastRollback" not in p.status and p.registry == []
    assert p.canary == V2 and p.weight == 33  # the canary keeps its pods and its share
    held_status = {**canary_status(failedAnalyses=1), "analysis": p.status["analysis"]}
    # Much later: still held, never analysed again, never timed out by the progress deadline.
    later = NOW + timedelta(hours=2)
    again = plan(observe(s, stable=track(V1), canary=track(V2, 1), status=held_status, now=later))
    assert (again.phase, cond(again, "Ready").reason, again.analyze) == ("Paused", "AnalysisFailed", False)
    assert "errorRate 0.31 > 0.05" in cond(again, "Ready").message
    promoted = plan(observe(s, stable=track(V1), canary=track(V2, 1), status=held_status, now=later,
                            annotations={"slipway.dev/promote": "true"}))  # fmt: skip
    assert promoted.phase == "Promoting"
    aborted = plan(observe(s, stable=track(V1), canary=track(V2, 1), status=held_status, now=later,
                           annotations={"slipway.dev/abort": "true"}))  # fmt: skip
    assert (aborted.phase, aborted.status["lastRollback"]["reason"]) == ("RolledBack", "Aborted")


def test_on_failure_defaults_to_rollback():
    assert spec().rollout.on_failure == "Rollback"
    with pytest.raises(ValueError):
        spec(onFailure="Ignore")


def dry_run_outcome(dry: str, deciding: str = "Passed") -> AnalysisOutcome:
    """errorRate deciding, latency in dry run."""
    return AnalysisOutcome((
        MetricResult("errorRate", "q", 0.0, "<= 0.05", deciding, iso(NOW), "ok"),  # type: ignore[arg-type]
        MetricResult("latencyP95Seconds", "q", 0.9, "<= 0.1", dry, iso(NOW), "latency 0.9 > 0.1",  # type: ignore[arg-type]
                     dry_run=True),
    ))  # fmt: skip


def test_a_dry_run_metric_is_shown_and_never_decides():
    metrics = [{"name": "errorRate", "max": 0.05}, {"name": "latencyP95Seconds", "max": 0.1, "dryRun": True}]
    s = spec(analysis={"failureLimit": 0, "metrics": metrics})
    assert s.rollout.analysis is not None and s.rollout.analysis.metrics[1].dry_run
    for dry in ("Failed", "Inconclusive"):
        result = dry_run_outcome(dry)
        assert result.verdict == "Passed" and result.first_failure is None
        later = NOW + timedelta(seconds=31)
        p = plan(observe(s, stable=track(V1), canary=track(V2, 1), status=canary_status(), analysis=result, now=later))
        assert (p.phase, p.status["currentStep"], p.status["failedAnalyses"]) == ("Analyzing", 1, 0)
        shown = p.status["analysis"][1]
        assert (shown["metric"], shown["result"], shown["dryRun"]) == ("latencyP95Seconds", dry, True)
        assert "dryRun" not in p.status["analysis"][0]
    # Recorded results of an earlier pass: the dry-run failure does not hold the step either.
    s = spec(analysis={"failureLimit": 0, "interval": "60s", "metrics": metrics})  # the next one not due yet
    recorded = canary_status(analysis=dry_run_outcome("Failed").to_status())
    p = plan(observe(s, stable=track(V1), canary=track(V2, 1), status=recorded, now=NOW + timedelta(seconds=31)))
    assert not p.analyze
    assert p.status["currentStep"] == 1
    # The deciding metric still decides.
    failed = dry_run_outcome("Failed", deciding="Failed")
    assert failed.verdict == "Failed" and failed.metric == "errorRate"
    # Only dry-run metrics: every analysis passes (Argo Rollouts' dryRun does the same).
    only = AnalysisOutcome((MetricResult("x", "q", 1, "<= 0", "Failed", iso(NOW), "m", dry_run=True),))
    assert only.verdict == "Passed"


def test_a_dry_run_metric_says_so_in_its_message():
    metric = AnalysisMetric(name="errorRate", max=0.05, dryRun=True)
    result = evaluate_metric(metric, Measurement("q", 0.3), None, "inconclusive", iso(NOW))
    assert result.result == "Failed" and result.dry_run and "dry run" in result.message
    assert result.to_status()["dryRun"] is True


def test_inconclusive_holds_and_never_advances():
    s = spec(analysis={"metrics": [{"name": "errorRate", "max": 0.05}]})
    p = plan(observe(s, stable=track(V1), canary=track(V2, 1), status=canary_status(1, NOW - timedelta(minutes=5)),
                     analysis=outcome("Inconclusive", None, "Prometheus unreachable")))  # fmt: skip
    assert (p.phase, cond(p, "Ready").reason) == ("Paused", "AnalysisInconclusive")
    assert "Prometheus unreachable" in cond(p, "Ready").message and p.stable is None


RETRY = INCONCLUSIVE_RETRY.total_seconds()


def test_an_inconclusive_first_analysis_is_tried_again_soon_then_once_per_interval():
    """A canary's first query usually comes before Prometheus holds two samples of it: waiting a
    whole interval for the next would delay the verdict on a bad canary by that much."""
    s = spec(analysis={"interval": "10s", "metrics": [{"name": "errorRate", "max": 0.05}]})
    no_data = outcome("Inconclusive", None, "errorRate: no data")
    first = plan(observe(s, stable=track(V1), canary=track(V2, 1), status=canary_status(), analysis=no_data))
    assert first.phase == "Paused" and first.next_analysis == RETRY == 1.0  # the pass comes back for it on time
    recorded = {**canary_status(), **first.status}  # the inconclusive result is on record at NOW
    for seconds, due in ((RETRY / 2, False), (RETRY, True)):
        later = plan(observe(s, stable=track(V1), canary=track(V2, 1), status=recorded,
                             now=NOW + timedelta(seconds=seconds)))  # fmt: skip
        assert later.analyze is due, seconds
    # Still so 20 s into the step (two scrapes of a pod just ready can take that long)...
    step_began = NOW - timedelta(seconds=20)
    young = plan(observe(s, stable=track(V1), canary=track(V2, 1), status=canary_status(since=step_began),
                         analysis=no_data))  # fmt: skip
    assert young.next_analysis == RETRY
    # ...but past the step's first 30 s, no data is queried once per interval, as anything else.
    step_began = NOW - timedelta(seconds=30)
    old = plan(observe(s, stable=track(V1), canary=track(V2, 1), status=canary_status(since=step_began),
                       analysis=no_data))  # fmt: skip
    assert old.next_analysis == 10.0
    old_status = {**canary_status(since=step_began), **old.status}
    for seconds, due in ((2, False), (9, False), (10, True)):
        later = plan(observe(s, stable=track(V1), canary=track(V2, 1), status=old_status,
                             now=NOW + timedelta(seconds=seconds)))  # fmt: skip
        assert later.analyze is due, seconds
    # A result that is not inconclusive waits the whole interval; and retrying never fails sooner.
    failed = plan(observe(s, stable=track(V1), canary=track(V2, 1), status=canary_status(),
                          analysis=outcome("Failed", 0.3)))  # fmt: skip
    assert failed.next_analysis == 10.0 and failed.status["failedAnalyses"] == 1
    assert not plan(observe(s, stable=track(V1), canary=track(V2, 1), status={**canary_status(), **failed.status},
                            now=NOW + timedelta(seconds=2))).analyze  # fmt: skip


def test_a_cold_canary_is_first_analysed_once_its_warmup_has_passed():
    """spec.rollout.analysis.warmup: a canary whose cache starts empty (an LLM server's prefix cache) is
    not judged during its cold spell; the step holds, saying why and for how long, and is analysed
    once it has passed."""
    s = spec(analysis={"interval": "10s", "warmup": "45s", "metrics": [{"name": "ttftP95Seconds",
                                                                         "maxRelativeToStable": 1.5}]})  # fmt: skip
    for seconds, due in ((0, False), (30, False), (44, False), (45, True), (60, True)):
        p = plan(observe(s, stable=track(V1), canary=track(V2, 1), status=canary_status(),
                         now=NOW + timedelta(seconds=seconds)))  # fmt: skip
        assert p.analyze is due, seconds
        if not due:
            assert (p.phase, cond(p, "Ready").reason) == ("Paused", "AnalysisInconclusive")
            assert f"warming up: the first analysis in {45 - seconds}s" in cond(p, "Ready").message
            assert p.next_analysis == 45 - seconds and p.status["currentStep"] == 0
    # Once warm, an inconclusive first analysis is tried again soon, as for any canary.
    no_data = outcome("Inconclusive", None, "ttftP95Seconds: no data")
    warm = canary_status(since=NOW - timedelta(seconds=45))
    first = plan(observe(s, stable=track(V1), canary=track(V2, 1), status=warm, analysis=no_data))
    assert first.next_analysis == RETRY


def test_the_next_analysis_is_due_an_interval_after_the_last_whatever_woke_the_pass_between():
    """A pass woken by something else (an HPA status, a pod event) just before the analysis is
    due must not push the analysis a whole requeue later: the plan says when it is due."""
    s = spec(analysis={"interval": "10s", "metrics": [{"name": "errorRate", "max": 0.05}]})
    failed = plan(observe(s, stable=track(V1), canary=track(V2, 1), status=canary_status(),
                          analysis=outcome("Failed", 0.3)))  # fmt: skip
    status = {**canary_status(), **failed.status}
    early = plan(observe(s, stable=track(V1), canary=track(V2, 1), status=status, now=NOW + timedelta(seconds=9.7)))
    assert not early.analyze
    assert early.next_analysis == pytest.approx(0.3)
    assert plan(
        observe(s, stable=track(V1), canary=track(V2, 1), status=status, now=NOW + timedelta(seconds=10))
    ).analyze


# -- deadlines measure progress ---------------------------------------------------------------


def test_a_canary_that_never_becomes_ready_rolls_back_after_the_deadline():
    s = spec(progressDeadlineSeconds=60)
    long_ago = NOW - timedelta(seconds=61)
    p = plan(observe(s, stable=track(V1), canary=track(V2, 0, 1), status=canary_status(0, long_ago)))
    assert p.phase == "RolledBack" and p.status["lastRollback"]["reason"] == "ProgressDeadlineExceeded"


def test_a_canary_pod_restart_long_after_the_step_began_is_not_a_rollback():
    s = spec(progressDeadlineSeconds=60)
    step_began = NOW - timedelta(minutes=10)  # the step is far older than the deadline
    recently = NOW - timedelta(seconds=5)
    status = canary_status(0, step_began, progress=recently, canary={"revision": "rev2", "readyReplicas": 1})
    p = plan(observe(s, stable=track(V1), canary=track(V2, 0, 1), status=status))
    assert (p.phase, cond(p, "Ready").reason) == ("Progressing", "CanaryStarting")


def test_a_paused_rollout_never_times_out_and_holds_even_an_unready_canary():
    s = spec(progressDeadlineSeconds=60, paused=True)
    long_ago = NOW - timedelta(hours=2)
    p = plan(observe(s, stable=track(V1), canary=track(V2, 0, 1), status=canary_status(0, long_ago)))
    assert p.phase == "Paused" and p.status["lastProgressTime"] == iso(NOW)
    # Held by a person: no work in flight and nothing stuck, and not Ready either.
    assert [cond(p, t).status for t in ("Ready", "Reconciling", "Stalled")] == ["False", "False", "False"]


def test_an_unschedulable_canary_holds_with_the_schedulers_words():
    s = spec(progressDeadlineSeconds=600)
    words = "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    canary = track(V2, 0, 1, problem=("Unschedulable", f"pod c-1: {words}"))
    p = plan(observe(s, stable=track(V1), canary=canary, status=canary_status()))
    assert (p.phase, cond(p, "Stalled").status, cond(p, "Stalled").reason) == (
        "Progressing",
        "True",
        "CanaryUnschedulable",
    )
    assert words in cond(p, "Stalled").message


# -- promotion is guarded -------------------------------------------------------------------------


def promoting(**more: Any) -> dict:
    return {"phase": "Promoting", "canary": {"revision": "rev2"}, "lastProgressTime": iso(NOW),
            "previousStable": {"revision": "rev1", "modelName": "m", "modelVersion": "1", "uri": "models:/m/1"},
            "stable": {"readyReplicas": 2}, **more}  # fmt: skip


def test_the_last_step_starts_a_promotion_on_record_with_the_previous_stable():
    p = plan(
        observe(spec(), stable=track(V1), canary=track(V2, 1), status=canary_status(1, NOW - timedelta(minutes=5)))
    )
    assert (p.phase, p.durable, p.canary, p.stable) == ("Promoting", True, V2, None)
    # Nothing moves on the decision: the canary's pod keeps serving beside the stable's until the stable rolls.
    assert (p.stable_replicas, p.canary_replicas) == (2, 1)
    assert p.status["previousStable"]["revision"] == "rev1"


def test_promotion_rolls_the_stable_while_the_canary_serves_then_moves_the_canary_pods_over():
    s = spec(maxSurgeReplicas=1)  # 2 replicas: at the 50% step, 1 stable and 1 canary pod
    # The stable rolls at its count (1) while the canary's pod keeps serving: 2 pods serve throughout.
    rolling = plan(observe(s, stable=track(V1, 1), canary=track(V2, 1), status=promoting()))
    assert (rolling.phase, rolling.stable, rolling.canary) == ("Promoting", V2, V2)
    assert (rolling.stable_replicas, rolling.canary_replicas) == (1, 1)
    waiting = plan(observe(s, stable=track(V2, 0, 1, updated=1), canary=track(V2, 1), status=promoting()))
    assert (waiting.phase, waiting.stable_replicas, waiting.canary_replicas) == ("Promoting", 1, 1)
    # Mid-roll the old pods still count as ready and available: not rolled until they are gone.
    mid_roll = plan(observe(s, stable=track(V2, 1, 1, updated=1, pods=2), canary=track(V2, 1), status=promoting()))
    assert (mid_roll.phase, mid_roll.stable_replicas, mid_roll.canary_replicas) == ("Promoting", 1, 1)
    assert "waiting for the stable track" in cond(mid_roll, "Ready").message
    # Rolled: the stable grows within the surge (3 pods at most), then the canary goes as the stable's pods are ready.
    growing = plan(observe(s, stable=track(V2, 1), canary=track(V2, 1), status=promoting()))
    assert (growing.phase, growing.stable_replicas, growing.canary_replicas) == ("Promoting", 2, 1)
    assert "moving the canary's 1 pods to the stable track" in cond(growing, "Ready").message
    shrinking = plan(observe(s, stable=track(V2, 2), canary=track(V2, 1), status=promoting()))
    assert (shrinking.stable_replicas, shrinking.canary_replicas) == (2, 0)
    done = plan(observe(s, stable=track(V2, 2), canary=track(V2, 0, 0, pods=0), status=promoting()))
    assert done.phase == "Promoted" and done.registry[0]["action"] == "SetAlias"
    assert (done.stable_replicas, done.canary) == (2, None)


@pytest.mark.parametrize("mode", ["GatewayAPI", "InferencePool"])
def test_a_promotion_takes_the_canary_pods_off_the_route_before_they_stop(mode: str):
    """Where traffic follows the router's weights, a canary pod moved to the stable leaves the route first
    and stops only once the gateway has had spec.drain.delaySeconds to apply it: an endpoint picker drops
    a pod the moment it starts terminating, and its pool's requests would fail meanwhile."""
    s = spec({"mode": mode, "parentRefs": [{"name": "gw"}]}, maxSurgeReplicas=1)
    routed = promoting(canary={"revision": "rev2", "weight": 33})
    first = plan(observe(s, stable=track(V2, 2), canary=track(V2, 1), status=routed))
    assert (first.phase, first.canary_replicas, first.route_weight, first.wake_in) == ("Promoting", 1, 0, 5.0)
    left = {**routed, "canary": {**routed["canary"], **first.status.get("canary", {}), "weight": 0,
                                 "trafficLeftTime": iso(NOW)}}  # fmt: skip
    for seconds, pods in ((3, 1), (5, 0)):
        later = plan(observe(s, stable=track(V2, 2), canary=track(V2, 1), status=left,
                             now=NOW + timedelta(seconds=seconds)))  # fmt: skip
        assert (later.canary_replicas, later.route_weight) == (pods, 0), seconds
    # With the Service over both tracks (Replicas) the pods are the traffic: they go at once, as before.
    replicas = plan(observe(spec(maxSurgeReplicas=1), stable=track(V2, 2), canary=track(V2, 1), status=routed))
    assert (replicas.canary_replicas, replicas.wake_in) == (0, None)


def test_when_the_hpa_changes_the_total_mid_step_the_split_follows_and_the_step_goes_on():
    s = spec(maxSurgeReplicas=2, steps=[{"weight": 50, "pause": "60s"}, {"weight": 80}])
    s = s.model_copy(update={"replicas": 4})  # the HPA: 2 -> 4
    since = NOW - timedelta(seconds=30)
    p = plan(observe(s, stable=track(V1, 1), canary=track(V2, 1), status=canary_status(since=since)))
    # 2 of 4 now: the canary grows (within 4 + 2 pods), the stable first, the step's clock keeps running.
    assert (p.phase, p.requested_weight, p.stable_replicas, p.canary_replicas) == ("Analyzing", 50, 2, 2)
    assert p.status["stepStartTime"] == iso(since)
    later = plan(observe(s, stable=track(V1, 2), canary=track(V2, 2), status=canary_status(since=since)))
    assert (later.stable_replicas, later.canary_replicas, later.weight) == (2, 2, 50)


def test_a_promotion_without_spare_gpus_takes_one_pod_out_at_a_time():
    s = spec(maxSurgeReplicas=0, maxUnavailableReplicas=1)
    rolling = plan(observe(s, stable=track(V2, 1), canary=track(V2, 1), status=promoting()))
    assert (rolling.stable_replicas, rolling.canary_replicas) == (1, 0)  # the canary's pod goes first (2 - 1 ready)
    after = plan(observe(s, stable=track(V2, 1), canary=track(V2, 0, 0, pods=0), status=promoting()))
    assert (after.phase, after.stable_replicas) == ("Promoting", 2)


def test_a_surge_roll_whose_ready_count_never_rises_progresses_by_the_deployment_controllers_word():
    # Mid-roll: a new pod ready and an old one gone leave 2 ready, as the last pass saw; only the
    # Deployment's Progressing condition says the roll went a step on, 5 s ago.
    old = promoting(lastProgressTime=iso(NOW - timedelta(seconds=601)), stable={"readyReplicas": 2})
    for progressed, phase, at in ((NOW - timedelta(seconds=5), "Promoting", NOW - timedelta(seconds=5)),
                                  (NOW + timedelta(seconds=3), "Promoting", NOW),  # a controller clock ahead
                                  (NOW - timedelta(seconds=700), "RolledBack", None),  # before the last progress
                                  (None, "RolledBack", None)):  # fmt: skip
        rolling = track(V2, 2, 2, updated=1, pods=3, progressed=progressed)
        p = plan(observe(spec(), stable=rolling, status=old))
        assert p.phase == phase, (progressed, p.phase)
        if at is not None:
            assert p.status["lastProgressTime"] == iso(at)
        else:
            assert p.status["lastRollback"]["reason"] == "PromotionFailed"


def test_a_deployments_progressing_condition_is_read_only_while_true():
    body = {"metadata": {"generation": 2, "labels": {}}, "spec": {"replicas": 2, "template": {"metadata": {}}},
            "status": {"observedGeneration": 2, "conditions": [
                {"type": "Progressing", "status": "True", "lastUpdateTime": "2026-12-04T13:38:01Z"}]}}  # fmt: skip
    assert track_of(body).progressed == datetime(2026, 12, 4, 13, 38, 1, tzinfo=UTC)
    body["status"]["conditions"][0]["status"] = "False"  # ProgressDeadlineExceeded: no progress to count
    assert track_of(body).progressed is None
    del body["status"]["conditions"]
    assert track_of(body).progressed is None


def test_a_promotion_whose_new_stable_pods_crash_loop_is_reverted_and_no_alias_moves():
    crashing = track(V2, 1, 2, updated=1, problem=("CrashLoopBackOff", "pod s-2: back-off restarting"))
    old = promoting(lastProgressTime=iso(NOW - timedelta(seconds=601)), stable={"readyReplicas": 1})
    p = plan(observe(spec(), stable=crashing, status=old))
    assert (p.phase, p.revert_stable, p.durable) == ("RolledBack", True, True)
    assert p.status["lastRollback"]["reason"] == "PromotionFailed"
    assert "CrashLoopBackOff" in cond(p, "Ready").message
    assert all(u["action"] != "SetAlias" for u in p.registry)


def test_abort_is_honoured_during_the_promotion():
    p = plan(observe(spec(), stable=track(V2, 1, 2, updated=1), status=promoting(),
                     annotations={"slipway.dev/abort": "true"}))  # fmt: skip
    assert (p.phase, p.revert_stable, p.consumed_annotation) == ("RolledBack", True, "slipway.dev/abort")
    assert p.status["lastRollback"]["reason"] == "PromotionAborted"


# -- rolled back revisions, retry, manual control -------------------------------------------------


def rolled_back() -> dict:
    return {
        "phase": "RolledBack",
        "lastRollback": {"reason": "AnalysisFailed", "revision": "rev2", "modelVersion": "2"},
    }


def test_a_rolled_back_revision_is_not_retried_but_a_spec_fix_or_retry_is_canaried():
    held = plan(observe(spec(), stable=track(V1), status=rolled_back()))
    assert (held.phase, held.canary) == ("RolledBack", None)
    assert "slipway.dev/retry" in cond(held, "Ready").message
    fixed = plan(observe(spec(), desired=replace(V2, revision="rev2-fixed"), stable=track(V1), status=rolled_back()))
    assert fixed.canary is not None and fixed.phase == "Progressing"
    retried = plan(observe(spec(), stable=track(V1), status=rolled_back(), annotations={"slipway.dev/retry": "true"}))
    assert retried.canary == V2 and retried.status["lastRollback"]["retried"] is True
    assert retried.consumed_annotation == "slipway.dev/retry"


def test_a_rolled_back_revision_of_another_model_does_not_block_this_one():
    other = Desired("2", "models:/b/2", "b", "rev-b-2")
    p = plan(observe(spec(), desired=other, stable=track(V1), status=rolled_back()))
    assert p.canary == other


def test_abort_and_promote_annotations():
    aborted = plan(observe(spec(), stable=track(V1), canary=track(V2, 1), status=canary_status(),
                           annotations={"slipway.dev/abort": "true"}))  # fmt: skip
    assert (aborted.phase, aborted.consumed_annotation) == ("RolledBack", "slipway.dev/abort")
    assert aborted.status["lastRollback"]["reason"] == "Aborted"
    promoted = plan(observe(spec(), stable=track(V1), canary=track(V2, 1), status=canary_status(),
                            annotations={"slipway.dev/promote": "true"}))  # fmt: skip
    assert (promoted.phase, promoted.consumed_annotation) == ("Promoting", "slipway.dev/promote")


def test_a_leftover_manual_annotation_is_dropped_when_nothing_rolls_out():
    p = plan(observe(spec(), desired=V1, stable=track(V1), annotations={"slipway.dev/abort": "x"}))
    assert p.consumed_annotation == "slipway.dev/abort" and p.phase == "Promoted"


# -- Ready means every replica ------------------------------------------------------------------


def test_a_stable_with_a_crash_looping_replica_is_degraded_not_ready_then_stalled():
    one_of_three = track(V1, 1, 3, problem=("CrashLoopBackOff", "pod s-2: back-off"))
    status = {"phase": "Promoted", "stable": {"revision": "rev1"}}
    p = plan(observe(spec(), desired=V1, stable=one_of_three, status=status))
    assert cond(p, "Ready").status == "False" and cond(p, "Degraded").status == "True"
    assert (
        "1/3 stable replicas ready" in cond(p, "Degraded").message and "CrashLoopBackOff" in cond(p, "Degraded").message
    )
    since = iso(NOW - timedelta(seconds=601))
    status["conditions"] = [
        {"type": "Degraded", "status": "True", "reason": "StableUnavailable", "lastTransitionTime": since}
    ]
    late = plan(observe(spec(), desired=V1, stable=one_of_three, status=status))
    assert (late.phase, cond(late, "Stalled").status) == ("Failed", "True")


def test_an_hpa_scale_up_of_a_promoted_stable_keeps_it_promoted_once_the_pods_are_ready():
    status = {"phase": "Promoted", "stable": {"revision": "rev1"}}
    p = plan(observe(spec(), desired=V1, stable=track(V1, 4), status=status))
    assert p.phase == "Promoted" and p.registry == []


# -- what to serve ------------------------------------------------------------------------------


def test_unresolvable_model_keeps_the_stable_serving():
    observed = observe(spec(), None, track(V1), status={"phase": "Promoted"})
    result = plan(replace(observed, desired_problem="ModelArtifact x is Validating"))
    assert (result.phase, result.stable, cond(result, "Stalled").status) == ("Promoted", None, "True")


def test_waiting_for_the_first_model_is_progress_not_failure():
    p = plan(replace(observe(spec(), None), desired_problem="no alias yet"))
    assert (p.phase, cond(p, "Reconciling").status) == ("Progressing", "True")


def test_a_lost_stable_track_is_restored_not_replaced_by_the_new_revision():
    status = {"stable": {"revision": "rev1", "modelName": "m", "modelVersion": "1", "uri": "models:/m/1"}}
    p = plan(observe(spec(), stable=None, status=status))
    assert p.stable == V1 and cond(p, "Ready").reason == "RestoringStable"


def test_track_statuses_report_revision_model_and_both_weights():
    status = canary_status()
    decision = plan(observe(spec(), stable=track(V1), canary=track(V2, 1), status=status))
    stable, canary = track_statuses(decision, track(V1), track(V2, 1))
    assert (stable.revision, stable.weight, canary.revision, canary.weight, canary.requested_weight) == (
        "rev1", 67, "rev2", 33, 20)  # fmt: skip


def test_each_track_links_the_version_it_serves_in_the_mlflow_ui():
    decision = plan(observe(spec(), stable=track(V1), canary=track(V2, 1), status=canary_status()))
    stable, canary = track_statuses(decision, track(V1), track(V2, 1), "https://ml.example.com/")
    assert stable.version_url == "https://ml.example.com/#/models/m/versions/1"
    assert canary.version_url == "https://ml.example.com/#/models/m/versions/2"
    assert track_statuses(decision, track(V1), track(V2, 1))[0].version_url is None  # no UI address: no link
    settled = plan(observe(spec(), desired=V1, stable=track(V1)))
    assert track_statuses(settled, track(V1), None, "https://ml.example.com")[1].version_url is None  # no canary


def test_only_a_validated_artifact_is_served():
    assert desired_from_artifact(None, "ns", "a") == (None, "ModelArtifact ns/a does not exist")
    pending = {"spec": {"model": {"name": "m"}}, "status": {"phase": "Validating"}}
    assert "only Validated artifacts are served" in desired_from_artifact(pending, "ns", "a")[1]
    validated = {"spec": {"model": {"name": "m"}}, "status": {"phase": "Validated", "modelVersion": "3",
                                                               "quantizedVersion": "4"}}  # fmt: skip
    assert desired_from_artifact(validated, "ns", "a") == (Desired("4", "models:/m/4", "m"), "")


def test_pods_the_api_server_refuses_to_create_make_the_track_report_why():
    from slipway.inference import build
    from slipway.inference.model import InferenceDeploymentSpec
    from slipway.inference.rollout.tracks import track_of

    served = InferenceDeploymentSpec.model_validate({"model": {"name": "m", "alias": "a"}, "image": "img:1"})
    deployment = build.deployment("d", "ns", served, "stable", "1", "models:/m/1", None, 2)
    deployment["metadata"]["generation"] = 1
    refused = 'pods "d-stable-x" is forbidden: violates PodSecurity "restricted:latest": privileged'
    deployment["status"] = {"observedGeneration": 1, "replicas": 0, "conditions": [
        {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate", "message": refused}]}  # fmt: skip
    observed = track_of(deployment)
    assert observed is not None and observed.problem == ("FailedCreate", refused)
    status = {"phase": "Promoted", "stable": {"revision": "rev1"}}
    p = plan(observe(spec(), desired=V1, stable=track(V1, 0, 2, problem=observed.problem), status=status))
    assert cond(p, "Degraded").status == "True" and "FailedCreate" in cond(p, "Degraded").message
    assert "violates PodSecurity" in cond(p, "Degraded").message
    deployment["status"]["conditions"][0]["status"] = "False"
    assert track_of(deployment).problem is None  # type: ignore[union-attr]


# -- bake -----------------------------------------------------------------------------------------


def baked_spec(**bake: Any) -> InferenceDeploymentSpec:
    metrics = [{"name": "errorRate", "max": 0.05}, {"name": "latencyP95Seconds", "maxRelativeToStable": 2}]
    return spec(analysis={"interval": "10s", "failureLimit": 1, "metrics": metrics}, bake={"duration": "60s", **bake})


def baking(since: datetime = NOW, **more: Any) -> dict:
    previous = {"revision": "rev1", "modelName": "m", "modelVersion": "1", "uri": "models:/m/1"}
    return {"phase": "Baking", "bakeStartTime": iso(since), "failedAnalyses": 0, "previousStable": previous,
            "stable": {"revision": "rev2", "readyReplicas": 2}, **more}  # fmt: skip


def test_a_bake_follows_the_promotion_the_alias_moves_and_ready_waits():
    s = baked_spec()
    p = plan(observe(s, stable=track(V2, 2), canary=track(V2, 0, 0, pods=0), status=promoting()))
    assert (p.phase, cond(p, "Ready").status, cond(p, "Ready").reason) == ("Baking", "False", "Baking")
    assert p.registry == [{"action": "SetAlias", "model": "m", "version": "2", "alias": "production"}] and p.durable
    assert p.status["bakeStartTime"] == iso(NOW) and "previousStable" not in p.status  # kept for a revert
    assert (p.analyze, p.analyze_track) == (True, "stable")


def test_a_bake_judges_absolute_thresholds_only():
    from slipway.inference.rollout.bake import bake_analysis

    settings = bake_analysis(baked_spec())
    assert settings is not None and [m.name for m in settings.metrics] == ["errorRate"]
    assert bake_analysis(spec(bake={})) is None  # nothing to judge: the bake is a wait


def test_a_breach_during_the_bake_reverts_moves_the_alias_back_and_tags_the_version():
    s = baked_spec()
    once = plan(observe(s, stable=track(V2), status=baking(NOW - timedelta(seconds=20)),
                        analysis=outcome("Failed", 0.3)))  # fmt: skip
    assert (once.phase, once.status["failedAnalyses"]) == ("Baking", 1)  # failureLimit 1: one is tolerated
    held = baking(NOW - timedelta(seconds=30), failedAnalyses=1, analysis=once.status["analysis"])
    p = plan(observe(s, stable=track(V2), status=held, analysis=outcome("Failed", 0.3)))
    assert (p.phase, p.revert_stable, p.durable, cond(p, "Ready").reason) == ("RolledBack", True, True, "BakeFailed")
    assert p.status["lastRollback"]["reason"] == "BakeFailed" and p.status["lastRollback"]["modelVersion"] == "2"
    assert {"action": "SetAlias", "model": "m", "version": "1", "alias": "production"} in p.registry
    assert any(u["action"] == "SetTag" and u["key"] == ROLLBACK_TAG for u in p.registry)
    # Then the reverted revision is not served again until someone asks.
    after = plan(observe(s, stable=track(V1), status={"phase": "RolledBack", "lastRollback": p.status["lastRollback"]}))
    assert (after.phase, after.canary) == ("RolledBack", None)


def test_a_healthy_bake_ends_promoted_and_ready_without_moving_the_alias_again():
    s = baked_spec()
    passed = [{"metric": "errorRate", "result": "Passed", "time": iso(NOW - timedelta(seconds=5))}]
    p = plan(observe(s, stable=track(V2), status=baking(NOW - timedelta(seconds=61), analysis=passed)))
    assert (p.phase, cond(p, "Ready").status, p.registry) == ("Promoted", "True", [])
    assert p.status["bakeStartTime"] is None and p.status["previousStable"] is None
    early = plan(observe(s, stable=track(V2), status=baking(NOW - timedelta(seconds=30), analysis=passed)))
    assert early.phase == "Baking" and "30s of spec.rollout.bake.duration left" in cond(early, "Ready").message


V3 = Desired("3", "models:/m/3", "m", "rev3")
ABORT = {"slipway.dev/abort": "true"}


def test_a_new_revision_during_a_bake_waits_for_the_bake_to_be_concluded():
    s = baked_spec()
    mid = baking(NOW - timedelta(seconds=30), canary={"revision": "rev2"})
    p = plan(observe(s, desired=V3, stable=track(V2), status=mid))
    # The bake goes on judging version 2 on the stable's pods; version 3 gets no canary yet.
    assert (p.phase, p.canary, p.stable, p.rollout) == ("Baking", None, V2, V2)
    assert (p.analyze, p.analyze_track) == (True, "stable")
    assert "m version 3 (revision rev3) waits until the bake is over" in cond(p, "Ready").message
    assert "slipway.dev/abort=true" in cond(p, "Ready").message
    # A failure past failureLimit still reverts version 2 to the previous stable, alias included.
    failing = baking(NOW - timedelta(seconds=30), canary={"revision": "rev2"}, failedAnalyses=1)
    reverted = plan(observe(s, desired=V3, stable=track(V2), status=failing, analysis=outcome("Failed", 0.3)))
    assert (reverted.phase, reverted.revert_stable, reverted.status["lastRollback"]["revision"]) == (
        "RolledBack", True, "rev2")  # fmt: skip
    assert {"action": "SetAlias", "model": "m", "version": "1", "alias": "production"} in reverted.registry
    assert reverted.wake_in == 0.0  # the waiting revision is rolled out on the next pass
    # Then version 3 is canaried against version 1, the stable the revert restored.
    after = {"phase": "RolledBack", "lastRollback": reverted.status["lastRollback"]}
    canary = plan(observe(s, desired=V3, stable=track(V1), status=after))
    assert (canary.canary, canary.phase) == (V3, "Progressing")


def test_a_bake_that_passes_with_a_new_revision_waiting_ends_promoted_then_canaries_it():
    s = baked_spec()
    passed = [{"metric": "errorRate", "result": "Passed", "time": iso(NOW - timedelta(seconds=5))}]
    over = baking(NOW - timedelta(seconds=61), canary={"revision": "rev2"}, analysis=passed)
    p = plan(observe(s, desired=V3, stable=track(V2), status=over))
    assert (p.phase, p.stable, p.canary, p.registry, p.wake_in) == ("Promoted", V2, None, [], 0.0)
    nxt = plan(observe(s, desired=V3, stable=track(V2), status={"phase": "Promoted", "stable": {"revision": "rev2"}}))
    assert (nxt.canary, nxt.phase) == (V3, "Progressing")


def test_abort_during_a_bake_reverts_to_the_previous_stable_and_moves_the_alias_back():
    s = baked_spec()
    for desired in (V2, V3):  # the spec still asks for the baked revision, or a newer one waits
        p = plan(observe(s, desired=desired, stable=track(V2), annotations=ABORT,
                         status=baking(NOW - timedelta(seconds=10), canary={"revision": "rev2"})))  # fmt: skip
        assert (p.phase, p.revert_stable, p.durable, p.consumed_annotation) == (
            "RolledBack", True, True, "slipway.dev/abort")  # fmt: skip
        assert (cond(p, "Ready").reason, p.status["lastRollback"]["reason"]) == ("Aborted", "Aborted")
        assert p.status["lastRollback"]["revision"] == "rev2" and p.status["bakeStartTime"] is None
        assert {"action": "SetAlias", "model": "m", "version": "1", "alias": "production"} in p.registry
        assert any(u["action"] == "SetTag" and "reason=Aborted" in u["value"] for u in p.registry)
        assert not p.analyze and "aborted by the slipway.dev/abort annotation" in cond(p, "Ready").message


def test_the_promote_alias_target_follows_what_status_holds():
    s = baked_spec()
    bake = plan(observe(s, stable=track(V2), canary=track(V2, 0, 0, pods=0), status=promoting()))
    assert alias_target(observe(s, stable=track(V2), status=promoting()), bake) == ("m", "2")
    mid = plan(observe(s, stable=track(V1), canary=track(V2, 1), status=canary_status()))
    assert alias_target(observe(s, stable=track(V1)), mid) == ("m", "1")  # a canary: the stable's
    promotion = observe(s, stable=track(V2, 1, 2, updated=1), status=promoting())
    assert alias_target(promotion, plan(promotion)) == ("m", "1")  # mid-promotion: the alias has not moved yet
    aborted = observe(s, stable=track(V2), annotations=ABORT, status=baking(canary={"revision": "rev2"}))
    assert alias_target(aborted, plan(aborted)) == ("m", "1")  # reverted: back to previousStable
    nothing = observe(s, desired=None)
    assert alias_target(nothing, plan(nothing)) is None


def test_a_rollback_is_new_once_its_retry_mark_or_the_stored_record_is_not():
    rollback = plan(observe(spec(), stable=track(V1), canary=track(V2, 1), status=canary_status(), annotations=ABORT))
    record = new_rollback(canary_status(), rollback)
    assert record is not None and record["reason"] == "Aborted"
    assert new_rollback({"lastRollback": record}, rollback) is None  # the same decision, planned again
    retried = plan(observe(spec(), stable=track(V1), status=rolled_back(), annotations={"slipway.dev/retry": "1"}))
    assert "lastRollback" in retried.status and new_rollback(rolled_back(), retried) is None


# -- what a second read of the split found ----------------------------------------------------------


def test_a_gateway_promotion_keeps_sending_the_canary_its_share_while_the_stable_rolls():
    s = spec(traffic={"mode": "GatewayAPI", "parentRefs": [{"name": "web"}]})
    p = plan(observe(s, stable=track(V1, 1), canary=track(V2, 1), status=promoting()))
    assert (p.phase, p.route_weight) == ("Promoting", 50)  # 1 ready pod each: not all on the single stable pod


def test_a_promotion_on_one_replica_rolls_the_stable_within_the_budget():
    s = spec().model_copy(update={"autoscaling": spec().autoscaling.model_copy(update={"min_replicas": 1})})
    s = s.model_copy(update={"replicas": 1})  # 1 replica (the defaults), surge 1
    p = plan(observe(s, stable=track(V1, 1), canary=track(V2, 1), status=promoting()))
    # 1 stable + 1 canary pod use the whole budget (1 + 1): the stable's pod is replaced, not surged.
    assert (p.stable, p.stable_replicas, p.stable_budget) == (V2, 1, (0, 1))
    roomy = plan(observe(spec(maxSurgeReplicas=3), stable=track(V1, 2), canary=track(V2, 1), status=promoting()))
    assert roomy.stable_budget == (2, 0)  # 2 replicas + 3 surge - 2 stable - 1 canary pod: a surge of 2 is left
    plenty = plan(observe(spec(maxSurgeReplicas=3), stable=track(V1, 1), canary=track(V2, 1), status=promoting()))
    assert plenty.stable_budget is None  # all of the spec's surge is free


def test_moving_the_canary_pods_over_never_reverts_a_promotion_that_rolled():
    stale = promoting(lastProgressTime=iso(NOW - timedelta(seconds=700)), stable={"readyReplicas": 1})
    growing = track(V2, 1, 2, updated=2, pods=2)  # grown from 1 to 2 for the canary's pod: not complete yet
    p = plan(observe(spec(), stable=growing, canary=track(V2, 1), status=stale))
    assert p.phase == "Promoting" and "moving the canary's 1 pods" in cond(p, "Ready").message


def test_a_rollback_after_a_100_percent_step_keeps_the_canary_until_the_stable_serves():
    s = spec(steps=[{"weight": 50}, {"weight": 100}])
    status = canary_status(step=1, failedAnalyses=5)
    p = plan(observe(s, stable=track(V1, 0, 0, pods=0), canary=track(V2, 2), status=status,
                     annotations={"slipway.dev/abort": "true"}))  # fmt: skip
    assert p.phase == "RolledBack"
    assert p.canary == V2 and p.canary_replicas == 2 and p.stable_replicas == 1  # the stable grows within surge 1
    once = plan(observe(s, stable=track(V1, 1, 1), canary=track(V2, 2),
                        status={"phase": "RolledBack", "lastRollback": p.status["lastRollback"]}))  # fmt: skip
    assert once.canary is None and once.stable_replicas == 1  # a ready stable pod: the canary leaves at once,
    gone = plan(observe(s, stable=track(V1, 1, 1), canary=track(V2, 0, 0, pods=0),  # and as its pods go,
                        status={"phase": "RolledBack", "lastRollback": p.status["lastRollback"]}))  # fmt: skip
    assert gone.stable_replicas == 2  # the stable takes them back within the budget


GATEWAY = {"mode": "GatewayAPI", "parentRefs": [{"name": "gw"}]}


@pytest.mark.parametrize(("traffic", "delay", "kept"), [
    (GATEWAY, 30, 1),  # default delay, within maxSurgeReplicas 1: one pod kept, no traffic
    (GATEWAY, 0, 0),  # no delay: the canary leaves at once
    (None, 30, 0),  # Replicas mode: its pods are its traffic, so it leaves at once
])  # fmt: skip
def test_a_rolled_back_canary_keeps_its_pods_out_of_traffic_for_the_scale_down_delay(traffic, delay, kept):
    s = spec(
        traffic,
        scaleDownDelaySeconds=delay,
        analysis={"failureLimit": 0, "metrics": [{"name": "errorRate", "max": 0.05}]},
    )
    failed = outcome("Failed", 0.31, "errorRate 0.31 > 0.05")
    canary = track(V2, 2)
    p = plan(observe(s, stable=track(V1), canary=canary, status=canary_status(), analysis=failed))
    assert p.phase == "RolledBack" and p.weight == 0 and p.route_weight == 0 and p.stable_replicas == 2
    assert p.canary_replicas == kept and (p.canary == V2 if kept else p.canary is None)
    assert p.wake_in == (pytest.approx(delay) if kept else None) and p.held_out is bool(kept)
    after = {"phase": "RolledBack", "lastRollback": p.status["lastRollback"]}
    # A later pass (a restarted operator: nothing but status) keeps them until the delay is over...
    within = plan(observe(s, stable=track(V1), canary=track(V2, 1), status=after, now=NOW + timedelta(seconds=20)))
    assert within.canary_replicas == kept and within.route_weight == 0
    assert within.wake_in == (pytest.approx(delay - 20) if kept else None)
    # ...then they go, and nothing wakes the object again.
    over = plan(observe(s, stable=track(V1), canary=track(V2, 1), status=after, now=NOW + timedelta(seconds=31)))
    assert (over.canary, over.canary_replicas, over.wake_in) == (None, 0, None)
    # A new revision in the meantime is a new canary, not a held one.
    fresh = plan(observe(s, desired=Desired("3", "models:/m/3", "m", "rev3"), stable=track(V1), canary=track(V2, 1),
                         status=after, now=NOW + timedelta(seconds=5)))  # fmt: skip
    assert fresh.canary is not None and fresh.canary.revision == "rev3" and fresh.wake_in is None


def test_a_held_out_canary_is_out_of_the_gateway_service_over_both_tracks_and_only_then():
    s = spec(GATEWAY)
    router = traffic.router("GatewayAPI")

    def selectors(weight: int, held_out: bool) -> dict[str, dict[str, str]]:
        return {svc["metadata"]["name"]: svc["spec"]["selector"]
                for svc in router.objects("digits", "team", s, weight, held_out)[kinds.SERVICE]}  # fmt: skip

    assert selectors(0, True)["digits"] == {"slipway.dev/deployment": "digits", "slipway.dev/track": "stable"}
    assert selectors(0, False)["digits"] == selectors(25, False)["digits"] == {"slipway.dev/deployment": "digits"}


def test_only_ready_canary_pods_are_held_out():
    s = spec(GATEWAY)
    p = plan(
        observe(
            s,
            stable=track(V1),
            canary=track(V2, 0, 1),
            status=canary_status(),
            annotations={"slipway.dev/abort": "true"},
        )
    )  # a canary that never became ready, aborted
    assert p.phase == "RolledBack" and (p.canary, p.canary_replicas, p.held_out) == (None, 0, False)


def test_a_gateway_rollback_after_a_100_percent_step_routes_to_the_canary_until_the_stable_serves():
    s = spec(GATEWAY, steps=[{"weight": 50}, {"weight": 100}])
    p = plan(observe(s, stable=track(V1, 0, 0, pods=0), canary=track(V2, 2), status=canary_status(step=1),
                     annotations={"slipway.dev/abort": "true"}))  # fmt: skip
    assert p.phase == "RolledBack" and p.canary == V2 and not p.held_out
    assert p.route_weight == p.weight == 100  # the only ready pods: not a route to an empty stable
    services = traffic.router("GatewayAPI").objects("digits", "team", s, p.route_weight, p.held_out)[kinds.SERVICE]
    assert {svc["metadata"]["name"]: svc["spec"]["selector"] for svc in services}["digits"] == {
        "slipway.dev/deployment": "digits"}  # fmt: skip


def test_a_revert_on_record_whose_deployment_write_failed_is_carried_out_again_not_promoted():
    s = baked_spec()
    reverted = plan(observe(s, stable=track(V2), annotations=ABORT, status=baking(canary={"revision": "rev2"})))
    on_record = {**baking(canary={"revision": "rev2"}), **reverted.status, "phase": "RolledBack"}
    # The next pass still finds the stable serving version 2 (the revert's write to it failed).
    again = plan(observe(s, stable=track(V2), status=on_record))
    assert (again.phase, again.revert_stable, again.registry, again.stable) == ("RolledBack", True, [], None)
    assert alias_target(observe(s, stable=track(V2), status=on_record), again) == ("m", "1")
    # Once it serves version 1, version 2 stays rolled back.
    done = plan(observe(s, stable=track(V1), status=on_record))
    assert (done.phase, done.revert_stable, done.canary) == ("RolledBack", False, None)


def test_a_first_revision_whose_pods_cannot_start_says_why_while_it_rolls_out():
    refused = ("CrashLoopBackOff", "pod s-1: init container fetch-model: configuration error: digest mismatch")
    p = plan(observe(spec(), desired=V1, stable=track(V1, 0, 1, problem=refused), status={"phase": "Progressing"}))
    assert p.phase == "Progressing" and cond(p, "Ready").status == "False"
    assert "0/1 replicas ready; CrashLoopBackOff: pod s-1: init container fetch-model" in cond(p, "Reconciling").message


def test_a_first_revision_that_never_had_a_ready_pod_is_replaced_without_a_canary():
    """An image the kubelet refuses: the fix replaces it on the stable track, as the first went."""
    refused = {"phase": "Progressing", "stable": {"revision": "rev1"},
               "canary": {"replicas": 0, "readyReplicas": 0, "weight": 0},  # as status shows it without one
               # as a spec change leaves them: Ready marked NewGeneration, Progressing kept
               "conditions": [{"type": "Ready", "status": "Unknown", "reason": "NewGeneration"},
                              {"type": "Progressing", "status": "True", "reason": "RollingOut"}]}  # fmt: skip
    fixed = plan(observe(spec(), desired=V2, stable=track(V1, ready=0, replicas=2), status=refused))
    assert (fixed.phase, fixed.stable, fixed.canary) == ("Progressing", V2, None)
    assert "never had a ready pod" in cond(fixed, "Ready").message
    # Anything served before (a ready pod, a promotion): a canary, as always.
    assert plan(observe(spec(), desired=V2, stable=track(V1, ready=1, replicas=2), status=refused)).canary == V2
    promoted = {**refused, "phase": "Promoted"}
    assert plan(observe(spec(), desired=V2, stable=track(V1, ready=0, replicas=2), status=promoted)).canary == V2
    canarying = {**refused, "canary": {"revision": "rev-other", "replicas": 1}}
    assert plan(observe(spec(), desired=V2, stable=track(V1, ready=0, replicas=2), status=canarying)).canary == V2
