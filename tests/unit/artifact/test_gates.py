"""Validation gates: absolute thresholds, relative drop against a baseline, missing baselines."""

from __future__ import annotations

import json

import pytest

from slipway.artifact.gates import (
    COST_PER_MILLION,
    Baseline,
    cost_per_million,
    evaluate_gate,
    evaluate_gates,
    with_derived,
)
from slipway.artifact.model import Gate
from slipway.prices import Prices

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


# ----------------------------------------------------------------------- cost (README, What it costs)

PRICES = Prices(currency="USD", gpu_hour={"default": 2.0}, cpu_hour=0.036, source="price file p.yaml")
CHEAP = Baseline(ref="production", version="3", metrics={"costPerMillionPredictions": 0.02})


def test_cost_per_million_predictions_is_the_price_of_a_cpu_second_over_its_predictions():
    # 0.036 per CPU-hour = 0.00001 per CPU-second; 500 predictions per CPU-second: 2e-8 each.
    value, why = cost_per_million({"predictionsPerCpuSecond": 500.0}, PRICES)
    assert value == pytest.approx(0.02) and why == ""
    # A GPU evaluator's throughput adds its GPU-seconds: 2.0 / 3600 / 1000 per prediction.
    both, _ = cost_per_million({"predictionsPerCpuSecond": 500.0, "predictionsPerGpuSecond": 1000.0}, PRICES)
    assert both == pytest.approx(0.02 + 2.0 / 3600 / 1000 * 1e6)


@pytest.mark.parametrize(
    ("values", "prices", "words"),
    [
        ({"accuracy": 0.9}, PRICES, "the evaluator logged no throughput (predictionsPerCpuSecond or"),
        ({"predictionsPerCpuSecond": 500.0}, Prices(gpu_hour={"default": 2.0}, source="price file p.yaml"),
         "no price: set cpuHour in price file p.yaml"),
        ({"predictionsPerCpuSecond": 500.0}, Prices(), "no price: set cpuHour in the price table (--prices-file"),
        ({"predictionsPerCpuSecond": 0.0}, PRICES, "a throughput is not positive"),
    ],
)  # fmt: skip
def test_a_cost_gate_without_throughput_or_price_fails_naming_what_is_missing(values, prices, words):
    derived, unavailable = with_derived(values, prices)
    assert COST_PER_MILLION not in derived
    g = gate(metric=COST_PER_MILLION, max=1.0)
    outcome = evaluate_gates([g], derived, {}, unavailable)[0]
    assert not outcome.passed
    assert outcome.message.startswith(f"{COST_PER_MILLION}: {words}")


def test_a_derived_cost_replaces_one_recorded_at_older_prices_and_an_underived_one_is_kept():
    recorded = {"predictionsPerCpuSecond": 500.0, COST_PER_MILLION: 99.0}
    assert with_derived(recorded, PRICES)[0][COST_PER_MILLION] == pytest.approx(0.02)
    assert with_derived({COST_PER_MILLION: 0.5}, PRICES) == ({COST_PER_MILLION: 0.5}, {})


@pytest.mark.parametrize(("value", "passed", "words"), [
    (0.017, True, "0.017 vs 0.02 of production: 0.85 x within 0.9 x"),
    (0.018, True, "0.9 x within 0.9 x"),
    (0.02, False, "0.02 is 1 x 0.02 of production (version 3), more than 0.9 x"),
    (0.03, False, "is 1.5 x 0.02 of production (version 3), more than 0.9 x"),
])  # fmt: skip
def test_max_relative_to_baseline_rejects_a_version_that_is_not_cheaper_enough(value, passed, words):
    g = gate(metric=COST_PER_MILLION, maxRelativeToBaseline=0.9, baseline="production")
    outcome = evaluate_gate(g, value, CHEAP)
    assert outcome.passed is passed and words in outcome.message
    assert outcome.threshold == "<= 0.9 x production" and outcome.baseline_value == 0.02


def test_max_relative_to_baseline_needs_a_baseline_and_follows_on_missing_baseline():
    with pytest.raises(ValueError, match="need a baseline"):
        gate(metric=COST_PER_MILLION, maxRelativeToBaseline=0.9)
    with pytest.raises(ValueError, match="greater than 0"):
        gate(metric=COST_PER_MILLION, maxRelativeToBaseline=0, baseline="production")
    g = gate(metric=COST_PER_MILLION, maxRelativeToBaseline=0.9, baseline="production", onMissingBaseline="fail")
    missing = evaluate_gate(g, 0.01, NO_PROD).message
    assert missing == "baseline production does not exist yet: failed by onMissingBaseline=fail"
    zero = Baseline(ref="production", version="3", metrics={COST_PER_MILLION: 0.0})
    assert "not positive, no ratio" in evaluate_gate(g, 0.01, zero).message


# ------------------------------------------------------------ non-finite values (NaN, +/-Infinity)

NON_FINITE = [
    (float("nan"), "NaN (not a number)"),
    (float("inf"), "Infinity"),
    (float("-inf"), "-Infinity"),
    (1.7976931348623157e308, "Infinity"),  # how MLflow's SQL store returns a logged Infinity
    (-1.7976931348623157e308, "-Infinity"),
]
KINDS = {  # every kind of gate, each one a finite value such as 0.9 would pass
    "min": {"metric": "accuracy", "min": 0.85},
    "max": {"metric": "accuracy", "max": 0.99},
    "maxRelativeDrop": {"metric": "accuracy", "maxRelativeDrop": 0.5, "baseline": "production"},
    "maxRelativeToBaseline": {"metric": "accuracy", "maxRelativeToBaseline": 2.0, "baseline": "production"},
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("value", "reads"), NON_FINITE)
def test_a_non_finite_value_fails_every_kind_of_gate_saying_so(kind, value, reads):
    assert evaluate_gate(gate(**KINDS[kind]), 0.9, PROD).passed  # the gate passes a finite value
    outcome = evaluate_gate(gate(**KINDS[kind]), value, PROD)
    assert not outcome.passed
    assert outcome.message == f"accuracy is {reads}: a non-finite value never passes a gate"
    status = outcome.to_status()  # JSON has no NaN: the value is left out, the message says what it was
    assert "value" not in status and status["message"] == outcome.message
    assert json.loads(json.dumps(status, allow_nan=False)) == status


@pytest.mark.parametrize("kind", ["maxRelativeDrop", "maxRelativeToBaseline"])
@pytest.mark.parametrize(("value", "reads"), NON_FINITE)
@pytest.mark.parametrize(("policy", "passed"), [("pass", True), ("fail", False)])
def test_a_non_finite_baseline_value_counts_as_missing(kind, value, reads, policy, passed):
    g = gate(**KINDS[kind], onMissingBaseline=policy)
    baseline = Baseline(ref="production", version="3", metrics={"accuracy": value})
    outcome = evaluate_gate(g, 0.9, baseline)
    assert outcome.passed is passed
    assert outcome.message == (
        f"baseline production (version 3) has no usable accuracy: the baseline's value is {reads}, not finite: "
        f"{'passed' if passed else 'failed'} by onMissingBaseline={policy}"
    )
    assert "baselineValue" not in outcome.to_status()
    json.dumps(outcome.to_status(), allow_nan=False)


def test_a_refused_baseline_tag_is_missing_with_its_reason():
    g = gate(metric="accuracy", maxRelativeDrop=0.02, baseline="production", onMissingBaseline="fail")
    why = "its MLflow tag slipway.dev/metric-accuracy is 'nan', NaN (not a number), not finite"
    baseline = Baseline(ref="production", version="3", metrics={}, refused={"accuracy": why})
    outcome = evaluate_gate(g, 0.9, baseline)
    assert not outcome.passed
    assert outcome.message == f"baseline production (version 3) has no usable accuracy: {why}: failed by " \
        "onMissingBaseline=fail"  # fmt: skip


@pytest.mark.parametrize(("value", "reads"), NON_FINITE)
def test_a_non_finite_throughput_derives_no_cost(value, reads):
    derived, unavailable = with_derived({"predictionsPerCpuSecond": value}, PRICES)
    assert COST_PER_MILLION not in derived  # an infinite throughput would have made it free
    outcome = evaluate_gates([gate(metric=COST_PER_MILLION, max=1.0)], derived, {}, unavailable)[0]
    assert not outcome.passed and "a throughput is not finite" in outcome.message
