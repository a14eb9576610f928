"""Validation gates: absolute thresholds, relative drop against a baseline, missing baselines."""

from __future__ import annotations

import pytest

from slipway.models.modelartifact import Gate
from slipway.status.gates import Baseline, evaluate_gate, evaluate_gates

PROD = Baseline(ref="production", version="3", metrics={"accuracy": 0.95})
NO_PROD = Baseline(ref="production", version=None, metrics={})


def gate(**kw) -> Gate:
    return Gate.model_validate(kw)


@pytest.mark.parametrize(
    ("spec", "value", "passed", "words"),
    [
        ({"metric": "accuracy", "min": 0.9}, 0.93, True, "meets >= 0.9"),
        ({"metric": "accuracy", "min": 0.9}, 0.85, False, "below the minimum 0.9"),
        ({"metric": "latencyP95Seconds", "max": 0.05}, 0.01, True, "meets <= 0.05"),
        ({"metric": "latencyP95Seconds", "max": 0.05}, 0.2, False, "above the maximum 0.05"),
        ({"metric": "sizeBytes", "min": 1, "max": 100}, 100, True, ">= 1 and <= 100"),
    ],
)
def test_absolute_gates(spec, value, passed, words):
    outcome = evaluate_gate(gate(**spec), value, None)
    assert outcome.passed is passed
    assert words in outcome.message or words in outcome.threshold


def test_metric_not_reported_fails_with_a_fix():
    outcome = evaluate_gate(gate(metric="f1", min=0.5), None, None)
    assert not outcome.passed
    assert "did not report f1" in outcome.message


def test_relative_drop_within_limit_passes_and_records_baseline():
    outcome = evaluate_gate(gate(metric="accuracy", maxRelativeDrop=0.02, baseline="production"), 0.94, PROD)
    assert outcome.passed
    assert outcome.baseline_value == 0.95
    assert outcome.threshold == "drop <= 2% of production"


def test_relative_drop_beyond_limit_fails_naming_numbers():
    outcome = evaluate_gate(gate(metric="accuracy", maxRelativeDrop=0.02, baseline="production"), 0.90, PROD)
    assert not outcome.passed
    assert "dropped 5.26316% from 0.95 of production (version 3)" in outcome.message


def test_improvement_is_no_drop():
    assert evaluate_gate(gate(metric="accuracy", maxRelativeDrop=0.0, baseline="production"), 0.99, PROD).passed


@pytest.mark.parametrize(("policy", "passed"), [("pass", True), ("fail", False)])
def test_missing_baseline_is_a_named_outcome(policy, passed):
    g = gate(metric="accuracy", maxRelativeDrop=0.02, baseline="production", onMissingBaseline=policy)
    outcome = evaluate_gate(g, 0.9, NO_PROD)
    assert outcome.passed is passed
    assert (
        f"baseline production does not exist yet: {'passed' if passed else 'failed'} by onMissingBaseline={policy}"
        == outcome.message
    )


def test_baseline_without_the_metric_is_missing_too():
    g = gate(metric="f1", maxRelativeDrop=0.02, baseline="production")
    outcome = evaluate_gate(g, 0.9, PROD)
    assert outcome.passed
    assert "has no f1" in outcome.message


def test_evaluate_gates_in_order_with_status_shape():
    gates = [gate(metric="accuracy", min=0.9), gate(metric="accuracy", maxRelativeDrop=0.01, baseline="production")]
    outcomes = evaluate_gates(gates, {"accuracy": 0.93}, {"production": PROD})
    assert [o.passed for o in outcomes] == [True, False]
    assert outcomes[1].to_status() == {
        "metric": "accuracy",
        "threshold": "drop <= 1% of production",
        "passed": False,
        "message": outcomes[1].message,
        "value": 0.93,
        "baselineValue": 0.95,
    }
