"""The operator's per-object gauges: what each status becomes, and nothing left behind (pure,
against prometheus_client's own registry)."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

import slipway.operator  # noqa: F401 - the kinds declare their phase gauges
from slipway import metrics


def value(metric: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(metric, labels)


def test_an_inference_deployment_mid_canary_and_after_its_rollback():
    gauges = metrics.ObjectGauges()
    canary = {
        "phase": "Analyzing",
        "stable": {"modelName": "digits", "modelVersion": "3"},
        "canary": {"modelName": "digits", "modelVersion": "4", "weight": 33, "requestedWeight": 50},
        "conditions": [{"type": "Ready", "status": "False", "reason": "Analyzing"},
                       {"type": "Stalled", "status": "False", "reason": "Analyzing"}],
    }  # fmt: skip
    who = {"namespace": "team-a", "name": "m-idep"}
    gauges.start("InferenceDeployment", "team-a", "m-idep")
    gauges.observe("InferenceDeployment", "team-a", "m-idep", canary)
    # Its counters exist from the start, at 0: the first rollback is an increase Prometheus sees.
    assert value("slipway_rollbacks_total", **who, reason="AnalysisFailed") == 0
    assert value("slipway_promotions_total", **who) == 0
    assert value("slipway_inferencedeployment_phase", **who, phase="Analyzing") == 1
    assert value("slipway_inferencedeployment_phase", **who, phase="Promoted") == 0
    assert value("slipway_inferencedeployment_canary_weight", **who) == 33
    assert value("slipway_inferencedeployment_requested_weight", **who) == 50
    assert value("slipway_inferencedeployment_track_info", **who, track="canary", model="digits", version="4") == 1
    assert value("slipway_object_ready", kind="InferenceDeployment", **who, reason="Analyzing") == 0
    rolled_back = {
        "phase": "RolledBack",
        "stable": {"modelName": "digits", "modelVersion": "3"},
        "canary": {"weight": 0},
        "conditions": [{"type": "Ready", "status": "False", "reason": "AnalysisFailed"},
                       {"type": "Stalled", "status": "True", "reason": "AnalysisFailed"}],
    }  # fmt: skip
    rolled_back["lastRollback"] = {"reason": "AnalysisFailed", "modelVersion": "4", "time": "2026-01-01T00:00:10Z"}
    gauges.observe("InferenceDeployment", "team-a", "m-idep", rolled_back)
    assert value("slipway_inferencedeployment_last_rollback_timestamp_seconds", **who, reason="AnalysisFailed",
                 version="4") == 1767225610  # fmt: skip
    assert value("slipway_inferencedeployment_phase", **who, phase="RolledBack") == 1
    assert value("slipway_inferencedeployment_phase", **who, phase="Analyzing") == 0
    assert value("slipway_object_stalled", kind="InferenceDeployment", **who) == 1
    # The series of the earlier state are gone, not left at their last value.
    assert value("slipway_inferencedeployment_track_info", **who, track="canary", model="digits", version="4") is None
    assert value("slipway_object_ready", kind="InferenceDeployment", **who, reason="Analyzing") is None
    gauges.forget("InferenceDeployment", "team-a", "m-idep")
    assert value("slipway_rollbacks_total", **who, reason="AnalysisFailed") is None
    assert value("slipway_inferencedeployment_phase", **who, phase="RolledBack") is None
    assert value("slipway_object_stalled", kind="InferenceDeployment", **who) is None


def test_training_progress_and_a_missing_or_odd_total():
    gauges = metrics.ObjectGauges()
    who = {"namespace": "team-a", "name": "run"}
    gauges.observe("TrainingRun", "team-a", "run", {"phase": "Running", "progress": {"step": 30, "totalSteps": 120}})
    assert value("slipway_trainingrun_step", **who) == 30
    assert value("slipway_trainingrun_progress_ratio", **who) == 0.25
    assert value("slipway_trainingrun_phase", **who, phase="Running") == 1
    gauges.observe("TrainingRun", "team-a", "run", {"phase": "Running", "progress": {"step": 31, "totalSteps": 0}})
    assert value("slipway_trainingrun_progress_ratio", **who) is None
    gauges.clear()
    assert value("slipway_trainingrun_step", **who) is None


def test_an_object_without_status_yet_is_no_phase_but_not_stalled():
    series = metrics.object_series("ModelArtifact", "ns", "a", {})
    assert {labels[-1]: v for g, labels, v in series if g is metrics.PHASE["ModelArtifact"]} == dict.fromkeys(
        metrics.PHASES["ModelArtifact"], 0.0
    )
    assert [(labels, v) for g, labels, v in series if g is metrics.STALLED] == [(("ModelArtifact", "ns", "a"), 0.0)]


def test_costs_are_gauges_a_dashboard_can_plot():
    gauges = metrics.ObjectGauges()
    gauges.observe("TrainingRun", "team-a", "run", {"cost": {"total": 1.5, "gpuHours": 0.5, "currency": "USD"}})
    assert value("slipway_trainingrun_cost", namespace="team-a", name="run", currency="USD") == 1.5
    assert value("slipway_trainingrun_gpu_seconds", namespace="team-a", name="run") == 1800  # base unit: seconds
    spent = {"currency": "USD", "perHour": 7.2, "per1kRequests": 0.1}
    gauges.observe("InferenceDeployment", "team-a", "llm", {"canary": {"cost": spent}})
    who = {"namespace": "team-a", "name": "llm", "track": "canary", "currency": "USD"}
    # One metric per unit, not a unit label: sum() or a ratio never mixes hours with requests.
    assert value("slipway_inferencedeployment_serving_cost_per_hour", **who) == 7.2
    assert value("slipway_inferencedeployment_serving_cost_per_1k_requests", **who) == 0.1
    assert value("slipway_inferencedeployment_serving_cost_per_million_tokens", **who) is None
    gauges.observe("InferenceDeployment", "team-a", "llm", {"canary": {"cost": {"currency": "USD", "perHour": 7.0}}})
    assert value("slipway_inferencedeployment_serving_cost_per_1k_requests", **who) is None
    gauges.clear()
    assert value("slipway_trainingrun_cost", namespace="team-a", name="run", currency="USD") is None
    assert value("slipway_inferencedeployment_serving_cost_per_hour", **who) is None


def test_build_info_names_the_running_build():
    from importlib.metadata import version
    from platform import python_version

    from slipway import __version__

    build = {"version": __version__, "python": python_version(), "kopf": version("kopf")}
    assert value("slipway_build_info", **build) == 1
    assert [s.labels for m in REGISTRY.collect() if m.name == "slipway_build_info" for s in m.samples] == [build]


def test_every_rollback_reason_the_rollout_records_starts_at_0_and_leaves_with_the_deployment():
    from slipway.inference.rollbacks import ROLLBACK_REASONS

    assert metrics.ROLLBACK_REASONS is ROLLBACK_REASONS and "BakeFailed" in ROLLBACK_REASONS
    gauges = metrics.ObjectGauges()
    who = {"namespace": "team-a", "name": "baked"}
    gauges.start("InferenceDeployment", "team-a", "baked")
    # A first bake revert is an increase from 0 that increase() sees.
    assert {r: value("slipway_rollbacks_total", **who, reason=r) for r in ROLLBACK_REASONS} == dict.fromkeys(
        ROLLBACK_REASONS, 0.0
    )
    metrics.count(metrics.ROLLBACKS, "team-a", "baked", "BakeFailed")
    assert value("slipway_rollbacks_total", **who, reason="BakeFailed") == 1
    gauges.forget("InferenceDeployment", "team-a", "baked")
    assert all(value("slipway_rollbacks_total", **who, reason=r) is None for r in ROLLBACK_REASONS)


def test_a_rollback_is_counted_once_its_status_write_landed_not_when_a_409_refused_it(monkeypatch):
    """The handler writes the decision, then counts: a conflict on that write ends the pass uncounted,
    and the next pass, deciding again, counts it once."""
    from slipway import kube
    from slipway.inference import handler

    writes: list[str] = []

    def flush(_ctx) -> None:
        if not writes:
            writes.append("409")
            raise kube.Conflict("patch InferenceDeployment team-a/twice: API server answered 409 Conflict", delay=0)
        writes.append("ok")

    monkeypatch.setattr(handler, "flush", flush)
    reconciler = object.__new__(handler.Reconciler)
    reconciler.ctx, reconciler.namespace, reconciler.name = None, "team-a", "twice"  # type: ignore[assignment]
    monkeypatch.setattr(reconciler, "write", lambda *_: None)
    record = {"reason": "BakeFailed", "revision": "rev2", "time": "2026-01-01T00:00:10Z"}
    who = {"namespace": "team-a", "name": "twice", "reason": "BakeFailed"}
    before = value("slipway_rollbacks_total", **who) or 0.0
    with pytest.raises(kube.Conflict):
        reconciler.put_on_record(None, {}, [], [], record)  # type: ignore[arg-type]
    assert (value("slipway_rollbacks_total", **who) or 0.0) == before
    reconciler.put_on_record(None, {}, [], [], record)  # type: ignore[arg-type]
    assert value("slipway_rollbacks_total", **who) == before + 1 and writes == ["409", "ok"]
    metrics.ObjectGauges().forget("InferenceDeployment", "team-a", "twice")


def test_every_phase_of_each_status_model_has_its_gauge_series():
    """A baking deployment reads Baking, 1, on the phase gauge: the phases come from the status models."""
    gauges = metrics.ObjectGauges()
    who = {"namespace": "team-a", "name": "baking-idep"}
    gauges.start("InferenceDeployment", "team-a", "baking-idep")
    gauges.observe("InferenceDeployment", "team-a", "baking-idep", {"phase": "Baking"})
    assert value("slipway_inferencedeployment_phase", **who, phase="Baking") == 1
    assert value("slipway_inferencedeployment_phase", **who, phase="Promoted") == 0
    gauges.forget("InferenceDeployment", "team-a", "baking-idep")
