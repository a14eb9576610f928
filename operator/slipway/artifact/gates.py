"""Validation gates of a ModelArtifact (pure).

A gate passes when every threshold it sets holds: ``min`` and ``max`` on the
candidate's value, and ``maxRelativeDrop`` against the baseline's value, where
drop = (baseline - candidate) / |baseline| (for metrics where higher is better,
such as accuracy), and ``maxRelativeToBaseline`` on the ratio candidate / baseline (for metrics
where lower is better, such as costPerMillionPredictions, which is derived here from the
evaluator's throughput and the price table). A baseline that does not exist yet, or lacks the metric, is
the named outcome ``onMissingBaseline``: pass or fail, never a crash.

A value that is not finite (NaN, +/-Infinity: a diverged fine-tune, an accuracy over an empty split)
never passes: a comparison with NaN is false either way, so without this check it would pass every
bound. MLflow's SQL store keeps Infinity as the largest double (+/-1.79769e+308), which counts as
Infinity here. A baseline whose value is not finite counts as missing.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from slipway.artifact.model import Gate
from slipway.prices import DEFAULT_PRODUCT, Prices
from slipway.status.conditions import bounds_text


@dataclass(frozen=True)
class Baseline:
    """The version a relative gate compares with, as found in MLflow."""

    ref: str  # the alias or version the user named
    version: str | None  # None: the alias points nowhere (yet)
    metrics: Mapping[str, float]
    refused: Mapping[str, str] = field(default_factory=dict)  # why a recorded metric is not used, by name


def non_finite(value: float) -> str | None:
    """How a value that no gate can pass reads ("NaN (not a number)", "Infinity", "-Infinity"), or None
    for a finite one. MLflow's SQL store returns Infinity as +/-sys.float_info.max: Infinity too."""
    if math.isnan(value):
        return "NaN (not a number)"
    if math.isinf(value) or abs(value) >= sys.float_info.max:
        return "Infinity" if value > 0 else "-Infinity"
    return None


@dataclass(frozen=True)
class GateOutcome:
    metric: str
    value: float | None
    threshold: str
    baseline_value: float | None
    passed: bool
    message: str

    def to_status(self) -> dict[str, object]:
        out: dict[str, object] = {
            "metric": self.metric,
            "threshold": self.threshold,
            "passed": self.passed,
            "message": self.message,
        }
        # JSON has no NaN nor Infinity: a non-finite value is left out, and the message says what it was.
        if self.value is not None and non_finite(self.value) is None:
            out["value"] = self.value
        if self.baseline_value is not None and non_finite(self.baseline_value) is None:
            out["baselineValue"] = self.baseline_value
        return out


def _fmt(value: float) -> str:
    return f"{value:.6g}"


def threshold_text(gate: Gate) -> str:
    parts = bounds_text(gate.min, gate.max, _fmt)
    if gate.max_relative_drop is not None:
        parts.append(f"drop <= {_fmt(gate.max_relative_drop * 100)}% of {gate.baseline}")
    if gate.max_relative_to_baseline is not None:
        parts.append(f"<= {_fmt(gate.max_relative_to_baseline)} x {gate.baseline}")
    return " and ".join(parts)


def evaluate_gate(
    gate: Gate, value: float | None, baseline: Baseline | None, unavailable: Mapping[str, str] | None = None
) -> GateOutcome:
    """Evaluate one gate on the candidate's value and (for relative gates) the baseline.
    ``unavailable``: why a derived metric has no value (e.g. a price missing), by metric."""
    threshold = threshold_text(gate)

    def outcome(passed: bool, message: str, baseline_value: float | None = None) -> GateOutcome:
        return GateOutcome(gate.metric, value, threshold, baseline_value, passed, message)

    if value is None:
        why = (unavailable or {}).get(gate.metric)
        return outcome(
            False,
            f"{gate.metric}: {why}"
            if why
            else f"the evaluator did not report {gate.metric}; log it to the validation run",
        )
    what = non_finite(value)
    if what is not None:
        return outcome(False, f"{gate.metric} is {what}: a non-finite value never passes a gate")
    if gate.min is not None and value < gate.min:
        return outcome(False, f"{gate.metric} {_fmt(value)} is below the minimum {_fmt(gate.min)}")
    if gate.max is not None and value > gate.max:
        return outcome(False, f"{gate.metric} {_fmt(value)} is above the maximum {_fmt(gate.max)}")
    if gate.max_relative_drop is None and gate.max_relative_to_baseline is None:
        return outcome(True, f"{gate.metric} {_fmt(value)} meets {threshold}")
    base_value = baseline.metrics.get(gate.metric) if baseline and baseline.version else None
    missing = _missing_baseline(gate, baseline, base_value)
    if missing is not None:
        if gate.on_missing_baseline == "pass":
            return outcome(True, f"{missing}: passed by onMissingBaseline=pass")
        return outcome(False, f"{missing}: failed by onMissingBaseline=fail")
    assert base_value is not None  # _missing_baseline said why otherwise
    return _against_baseline(gate, value, base_value, baseline, outcome)


def _against_baseline(
    gate: Gate,
    value: float,
    base_value: float,
    baseline: Baseline | None,
    outcome: Callable[[bool, str, float | None], GateOutcome],
) -> GateOutcome:
    """A relative gate's outcome: the candidate's ``value`` against the baseline's ``base_value``."""
    of = f"{_fmt(base_value)} of {gate.baseline} (version {baseline.version if baseline else '?'})"
    said = []
    if gate.max_relative_drop is not None:
        drop = (base_value - value) / abs(base_value) if base_value else 0.0
        if drop > gate.max_relative_drop:
            return outcome(
                False,
                f"{gate.metric} {_fmt(value)} dropped {_fmt(drop * 100)}% from {of}, more than "
                f"{_fmt(gate.max_relative_drop * 100)}%",
                base_value,
            )
        said.append(f"drop {_fmt(max(drop, 0) * 100)}% within {_fmt(gate.max_relative_drop * 100)}%")
    if gate.max_relative_to_baseline is not None:
        if base_value <= 0:
            return outcome(
                False, f"{gate.metric}: the baseline's value {of} is not positive, no ratio to it", base_value
            )
        ratio = value / base_value
        if ratio > gate.max_relative_to_baseline:
            return outcome(
                False,
                f"{gate.metric} {_fmt(value)} is {_fmt(ratio)} x {of}, more than "
                f"{_fmt(gate.max_relative_to_baseline)} x",
                base_value,
            )
        said.append(f"{_fmt(ratio)} x within {_fmt(gate.max_relative_to_baseline)} x")
    return outcome(
        True, f"{gate.metric} {_fmt(value)} vs {_fmt(base_value)} of {gate.baseline}: {', '.join(said)}", base_value
    )


def _missing_baseline(gate: Gate, baseline: Baseline | None, base_value: float | None) -> str | None:
    """Why the baseline has no value a relative gate can compare with, or None when it has one."""
    if not baseline or not baseline.version:
        return f"baseline {gate.baseline} does not exist yet"
    named = f"baseline {gate.baseline} (version {baseline.version})"
    if base_value is None:
        refused = baseline.refused.get(gate.metric)
        return f"{named} has no usable {gate.metric}: {refused}" if refused else f"{named} has no {gate.metric}"
    what = non_finite(base_value)
    if what is not None:
        return f"{named} has no usable {gate.metric}: the baseline's value is {what}, not finite"
    return None


COST_PER_MILLION = "costPerMillionPredictions"
THROUGHPUT_METRICS = {"predictionsPerCpuSecond": "cpu", "predictionsPerGpuSecond": "gpu"}


def cost_per_million(values: Mapping[str, float], prices: Prices) -> tuple[float | None, str]:
    """What a million predictions cost at the evaluator's throughput: for each resource it measured
    (predictions per CPU-second, per GPU-second), the price of a second of it over the predictions
    it makes in that second, summed; and why there is no value ("" when there is one)."""
    measured = {resource: values[key] for key, resource in THROUGHPUT_METRICS.items() if key in values}
    if not measured:
        return None, f"the evaluator logged no throughput ({' or '.join(THROUGHPUT_METRICS)})"
    hourly = {"cpu": prices.cpu_hour, "gpu": prices.gpu_price(None)}
    missing = [{"cpu": "cpuHour", "gpu": f"gpuHour.{DEFAULT_PRODUCT}"}[r] for r in measured if hourly[r] is None]
    if missing:
        where = prices.source or "the price table (--prices-file, Helm value prices)"
        return None, f"no price: set {', '.join(missing)} in {where}"
    if any(non_finite(rate) for rate in measured.values()):
        logged = ", ".join(f"{key} {values[key]}" for key in THROUGHPUT_METRICS if key in values)
        return None, f"a throughput is not finite ({logged}): a non-finite value never passes a gate"
    if any(not (rate > 0) for rate in measured.values()):
        logged = ", ".join(f"{key} {values[key]}" for key in THROUGHPUT_METRICS if key in values)
        return None, f"a throughput is not positive ({logged})"
    per_prediction = sum(float(hourly[r] or 0) / 3600 / rate for r, rate in measured.items())
    return per_prediction * 1e6, ""


def with_derived(values: Mapping[str, float], prices: Prices) -> tuple[dict[str, float], dict[str, str]]:
    """``values`` with the metrics the operator derives (costPerMillionPredictions at today's prices,
    replacing a value recorded at older ones or logged by the evaluator itself; kept when there is
    no throughput to derive it from), and why a derived metric has no value."""
    out = dict(values)
    derived, why = cost_per_million(values, prices)
    if derived is not None:
        out[COST_PER_MILLION] = derived
    return out, ({COST_PER_MILLION: why} if COST_PER_MILLION not in out else {})


def evaluate_gates(
    gates: list[Gate],
    metrics: Mapping[str, float],
    baselines: Mapping[str, Baseline],
    unavailable: Mapping[str, str] | None = None,
) -> list[GateOutcome]:
    """Every gate's outcome; ``baselines`` is keyed by the gate's ``baseline`` reference."""
    return [
        evaluate_gate(g, metrics.get(g.metric), baselines.get(g.baseline) if g.baseline else None, unavailable)
        for g in gates
    ]
