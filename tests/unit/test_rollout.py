"""The rollout state machine: first deploy, canary steps, analysis, promotion, rollbacks, manual control."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from slipway.analysis import AnalysisOutcome, MetricResult
from slipway.models import InferenceDeploymentSpec
from slipway.status.rollout import (
    Desired,
    Observed,
    Track,
    canary_replicas_for,
    plan,
    replica_weight,
    step_weights,
)

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def outcome(result: str, value: float | None = None, message: str = "") -> AnalysisOutcome:
    """One errorRate analysis with this result."""
    return AnalysisOutcome((MetricResult("errorRate", "q", value, "<= 0.05", result, iso(NOW), message),))  # type: ignore[arg-type]


V1, V2 = Desired("1", "models:/m/1"), Desired("2", "models:/m/2")


def spec(**rollout: Any) -> InferenceDeploymentSpec:
    return InferenceDeploymentSpec.model_validate(
        {
            "model": {"name": "m", "alias": "candidate"},
            "image": "i",
            "autoscaling": {"minReplicas": 2, "maxReplicas": 4},
            "rollout": {"steps": [{"weight": 20}, {"weight": 50}], "interval": "30s", **rollout},
        }
    )


def track(version: str, ready: int = 2, replicas: int | None = None, pods: int | None = None) -> Track:
    replicas = ready if replicas is None else replicas
    return Track(version, f"models:/m/{version}", replicas, ready, replicas, True, ready if pods is None else pods)


def observe(
    s: InferenceDeploymentSpec,
    desired=V2,
    stable=None,
    canary=None,
    status=None,
    annotations=None,
    now=NOW,
    analysis=None,
) -> Observed:
    return Observed(s, desired, None, stable, canary, status or {}, annotations or {}, now, analysis)


def iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def cond(p, type_: str):
    return next(c for c in p.conditions if c.type == type_)


def test_step_weights_from_steps_or_step_weight():
    assert step_weights(spec().rollout) == [20, 50]
    assert step_weights(spec(steps=None, stepWeight=10, maxWeight=30).rollout) == [10, 20, 30]


def test_canary_replicas_respect_surge_budget():
    assert canary_replicas_for(20, stable_ready=2, max_surge=1) == 1
    assert canary_replicas_for(50, stable_ready=4, max_surge=2) == 2
    assert canary_replicas_for(90, stable_ready=4, max_surge=2) == 2
    assert replica_weight(1, 2) == 33


def test_first_version_goes_straight_to_stable_then_promoted_with_alias():
    rolling = plan(observe(spec(), desired=V1))
    assert rolling.phase == "Progressing"
    assert rolling.stable == V1
    assert rolling.canary is None
    done = plan(observe(spec(), desired=V1, stable=track("1")))
    assert done.phase == "Promoted"
    assert cond(done, "Ready").status == "True"
    assert done.move_production_to == "1"
    again = plan(
        observe(spec(), desired=V1, stable=track("1"), status={"phase": "Promoted", "stable": {"modelVersion": "1"}})
    )
    assert again.move_production_to is None


def test_new_version_starts_a_canary_of_one_pod():
    p = plan(observe(spec(), stable=track("1")))
    assert p.phase == "Progressing"
    assert p.canary == V2
    assert p.canary_replicas == 1
    assert p.stable is None
    assert p.rollout_version == "2"
    assert p.status["canaryStartTime"] == iso(NOW)


def test_ready_canary_asks_for_analysis_then_holds_step_until_interval():
    s = spec(analysis={"metrics": [{"name": "errorRate", "max": 0.05}]})
    status = {"canary": {"modelVersion": "2"}, "currentStep": 0, "stepStartTime": iso(NOW), "canaryStartTime": iso(NOW)}
    first = plan(observe(s, stable=track("1"), canary=track("2", 1), status=status))
    assert first.analyze
    passed = outcome("Passed", 0.0)
    held = plan(observe(s, stable=track("1"), canary=track("2", 1), status=status, analysis=passed))
    assert held.phase == "Analyzing"
    assert held.status["currentStep"] == 0
    assert held.weight == 33
    later = NOW + timedelta(seconds=31)
    moved = plan(observe(s, stable=track("1"), canary=track("2", 1), status=status, analysis=passed, now=later))
    assert moved.status["currentStep"] == 1
    assert moved.status["stepStartTime"] == iso(later)


def test_last_step_passed_promotes_canary_first_scaled_away():
    status = {
        "canary": {"modelVersion": "2"},
        "currentStep": 1,
        "stepStartTime": iso(NOW - timedelta(minutes=1)),
        "canaryStartTime": iso(NOW - timedelta(minutes=2)),
    }
    p = plan(observe(spec(), stable=track("1"), canary=track("2", 1), status=status))
    assert p.phase == "Promoting"
    assert p.stable is None  # the canary still has pods
    assert p.canary is None
    status["phase"] = "Promoting"
    p2 = plan(observe(spec(), stable=track("1"), canary=track("2", 0, pods=0), status=status))
    assert p2.phase == "Promoting"
    assert p2.stable == V2
    p3 = plan(observe(spec(), stable=track("2"), canary=None, status=status))
    assert p3.phase == "Promoted"
    assert p3.move_production_to == "2"


def test_failed_analyses_beyond_limit_roll_back_naming_metric_and_value():
    s = spec(analysis={"failureLimit": 1, "metrics": [{"name": "errorRate", "max": 0.05}]})
    status = {
        "canary": {"modelVersion": "2"},
        "currentStep": 0,
        "stepStartTime": iso(NOW),
        "canaryStartTime": iso(NOW),
        "failedAnalyses": 1,
    }
    failed = outcome("Failed", 0.31, "errorRate 0.31 > 0.05")
    p = plan(observe(s, stable=track("1"), canary=track("2", 1), status=status, analysis=failed))
    assert p.phase == "RolledBack"
    assert p.canary is None and p.stable is None
    assert p.rollback == {
        "reason": "AnalysisFailed",
        "modelVersion": "2",
        "time": iso(NOW),
        "metric": "errorRate",
        "value": 0.31,
    }
    assert cond(p, "Stalled").status == "True"
    assert "errorRate 0.31 > 0.05" in cond(p, "Ready").message
    after = plan(observe(s, stable=track("1"), status={"lastRollback": p.rollback}))
    assert after.phase == "RolledBack"
    assert after.canary is None


def test_one_failure_within_limit_holds():
    s = spec(analysis={"failureLimit": 1, "metrics": [{"name": "errorRate", "max": 0.05}]})
    status = {
        "canary": {"modelVersion": "2"},
        "currentStep": 0,
        "stepStartTime": iso(NOW - timedelta(minutes=5)),
        "canaryStartTime": iso(NOW),
    }
    failed = outcome("Failed", 0.3, "x")
    p = plan(observe(s, stable=track("1"), canary=track("2", 1), status=status, analysis=failed))
    assert p.phase == "Analyzing"
    assert p.status["failedAnalyses"] == 1
    assert p.status["currentStep"] == 0


def test_inconclusive_pauses_and_never_advances():
    s = spec(analysis={"metrics": [{"name": "errorRate", "max": 0.05}]})
    status = {
        "canary": {"modelVersion": "2"},
        "currentStep": 1,
        "stepStartTime": iso(NOW - timedelta(minutes=5)),
        "canaryStartTime": iso(NOW),
    }
    verdict = outcome("Inconclusive", None, "Prometheus unreachable")
    p = plan(observe(s, stable=track("1"), canary=track("2", 1), status=status, analysis=verdict))
    assert p.phase == "Paused"
    assert cond(p, "Ready").reason == "AnalysisInconclusive"
    assert "Prometheus unreachable" in cond(p, "Ready").message
    assert p.stable is None


def test_canary_never_ready_rolls_back_at_progress_deadline():
    s = spec(progressDeadlineSeconds=60)
    long_ago = iso(NOW - timedelta(seconds=61))
    status = {"canary": {"modelVersion": "2"}, "canaryStartTime": long_ago, "stepStartTime": long_ago}
    p = plan(observe(s, stable=track("1"), canary=track("2", 0, replicas=1, pods=1), status=status))
    assert p.phase == "RolledBack"
    assert p.rollback is not None and p.rollback["reason"] == "ProgressDeadlineExceeded"


def test_abort_annotation_rolls_back_and_is_consumed():
    status = {"canary": {"modelVersion": "2"}, "canaryStartTime": iso(NOW)}
    p = plan(
        observe(
            spec(), stable=track("1"), canary=track("2", 1), status=status, annotations={"slipway.dev/abort": "true"}
        )
    )
    assert p.phase == "RolledBack"
    assert p.rollback is not None and p.rollback["reason"] == "Aborted"
    assert p.consumed_annotation == "slipway.dev/abort"


def test_promote_annotation_skips_remaining_steps():
    status = {"canary": {"modelVersion": "2"}, "currentStep": 0, "canaryStartTime": iso(NOW)}
    p = plan(
        observe(
            spec(), stable=track("1"), canary=track("2", 1), status=status, annotations={"slipway.dev/promote": "true"}
        )
    )
    assert p.phase == "Promoting"
    assert p.consumed_annotation == "slipway.dev/promote"


def test_paused_holds_the_step():
    status = {
        "canary": {"modelVersion": "2"},
        "currentStep": 0,
        "stepStartTime": iso(NOW - timedelta(hours=1)),
        "canaryStartTime": iso(NOW),
    }
    p = plan(observe(spec(paused=True), stable=track("1"), canary=track("2", 1), status=status))
    assert p.phase == "Paused"
    assert p.status["currentStep"] == 0


def test_gateway_mode_uses_exact_weights():
    s = InferenceDeploymentSpec.model_validate(
        {
            "model": {"artifactRef": {"name": "a"}},
            "image": "i",
            "rollout": {"steps": [{"weight": 10}]},
            "traffic": {"mode": "GatewayAPI", "parentRefs": [{"name": "gw"}]},
        }
    )
    status = {"canary": {"modelVersion": "2"}, "currentStep": 0, "stepStartTime": iso(NOW), "canaryStartTime": iso(NOW)}
    p = plan(observe(s, stable=track("1", 4), canary=track("2", 1), status=status))
    assert p.weight == 10


def test_unresolvable_model_keeps_stable_serving():
    p = plan(
        Observed(
            spec(), None, "alias candidate of model m does not exist", track("1"), None, {"phase": "Promoted"}, {}, NOW
        )
    )
    assert p.phase == "Promoted"
    assert cond(p, "Stalled").reason == "ModelUnavailable"
    assert p.stable is None


def test_waiting_for_the_first_model_is_progress_not_failure():
    p = plan(Observed(spec(), None, "MLflow model m has no alias candidate (yet)", None, None, {}, {}, NOW))
    assert p.phase == "Progressing"
    assert cond(p, "Reconciling").reason == "WaitingForModel"
    assert cond(p, "Stalled").status == "False"


def test_leftover_manual_annotation_is_dropped_when_no_canary_runs():
    p = plan(observe(spec(), desired=V1, stable=track("1"), annotations={"slipway.dev/promote": "true"}))
    assert p.phase == "Promoted"
    assert p.consumed_annotation == "slipway.dev/promote"


def test_scale_up_of_a_promoted_stable_stays_promoted():
    promoted = {"phase": "Promoted", "stable": {"modelVersion": "1"}}
    scaling = Track("1", "models:/m/1", replicas=4, ready=2, updated=4, generation_observed=True, pods=4)
    p = plan(observe(spec(), desired=V1, stable=scaling, status=promoted))
    assert p.phase == "Promoted"
    assert p.move_production_to is None


def test_lost_stable_track_is_restored_not_replaced_by_the_new_version():
    status = {"stable": {"modelVersion": "1", "uri": "models:/m/1"}, "canary": {"modelVersion": "2"}}
    p = plan(observe(spec(), desired=V2, stable=None, status=status))
    assert p.stable == V1
    assert p.phase == "Progressing"
    assert cond(p, "Ready").reason == "RestoringStable"


def test_a_new_canary_starts_without_the_previous_analysis():
    s = spec(analysis={"metrics": [{"name": "errorRate", "max": 0.05}]})
    old = {"canary": {"modelVersion": "2"}, "analysis": [{"metric": "errorRate", "result": "Passed", "time": iso(NOW)}]}
    p = plan(observe(s, desired=Desired("3", "models:/m/3"), stable=track("1"), status=old))
    assert p.status["analysis"] is None


def test_results_from_an_earlier_step_do_not_advance_this_one():
    s = spec(analysis={"interval": "1m", "metrics": [{"name": "errorRate", "max": 0.05}]})
    earlier = iso(NOW - timedelta(seconds=40))
    status = {
        "canary": {"modelVersion": "2"},
        "currentStep": 1,
        "stepStartTime": iso(NOW - timedelta(seconds=31)),
        "canaryStartTime": earlier,
        "analysis": [{"metric": "errorRate", "result": "Passed", "time": earlier}],
    }
    p = plan(observe(s, stable=track("1"), canary=track("2", 1), status=status))
    assert p.phase != "Promoting"


def test_track_statuses_report_the_real_share_and_the_rolled_out_version():
    from slipway.status.rollout import track_statuses

    s = spec(analysis={"metrics": [{"name": "errorRate", "max": 0.05}]})
    status = {"canary": {"modelVersion": "2"}, "currentStep": 0, "stepStartTime": iso(NOW), "canaryStartTime": iso(NOW)}
    decision = plan(observe(s, stable=track("1"), canary=track("2", 1), status=status))
    stable, canary = track_statuses(decision, track("1"), track("2", 1))
    assert (stable.model_version, stable.weight, canary.model_version, canary.weight) == ("1", 67, "2", 33)
    assert stable.weight + canary.weight == 100
    idle = track_statuses(plan(observe(s, desired=Desired("1", "models:/m/1"), stable=track("1"))), track("1"), None)
    assert idle[1].replicas == 0 and idle[1].model_version is None


def test_only_a_validated_artifact_is_served():
    from slipway.status.rollout import desired_from_artifact

    assert desired_from_artifact(None, "ns", "a") == (None, "ModelArtifact ns/a does not exist")
    pending = {"spec": {"model": {"name": "m"}}, "status": {"phase": "Validating"}}
    assert "only Validated artifacts are served" in desired_from_artifact(pending, "ns", "a")[1]
    validated = {"spec": {"model": {"name": "m"}}, "status": {"phase": "Validated", "modelVersion": "3",
                                                               "quantizedVersion": "4"}}  # fmt: skip
    assert desired_from_artifact(validated, "ns", "a") == (Desired("4", "models:/m/4"), "")
