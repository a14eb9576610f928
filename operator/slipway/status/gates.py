"""Validation gates of a ModelArtifact (pure).

A gate passes when every threshold it sets holds: ``min`` and ``max`` on the
candidate's value, and ``maxRelativeDrop`` against the baseline's value, where
drop = (baseline - candidate) / |baseline| (for metrics where higher is better,
such as accuracy). A baseline that does not exist yet, or lacks the metric, is
the named outcome ``onMissingBaseline``: pass or fail, never a crash.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from slipway.models.modelartifact import Gate


@dataclass(frozen=True)
class Baseline:
    """The version a relative gate compares with, as found in MLflow."""

    ref: str  # the alias or version the user named
    version: str | None  # None: the alias points nowhere (yet)
    metrics: Mapping[str, float]


@dataclass(frozen=True)
class GateOutcome:
    metric: str
    value: float | None
    threshold: str
    baseline_value: float | None
    passed: bool
    message: str

    def to_status(self) -> dict[str, object]:
        out: dict[str, object] = {"metric": self.metric, "threshold": self.threshold, "passed": self.passed,
                                  "message": self.message}  # fmt: skip
        if self.value is not None:
            out["value"] = self.value
        if self.baseline_value is not None:
            out["baselineValue"] = self.baseline_value
        return out


def _fmt(value: float) -> str:
    return f"{value:.6g}"


def bounds_text(minimum: float | None, maximum: float | None, fmt: Callable[[float], str]) -> list[str]:
    """Absolute bounds as people read them: ``>= 0.9``, ``<= 0.5``."""
    return [f"{op} {fmt(v)}" for op, v in ((">=", minimum), ("<=", maximum)) if v is not None]


def threshold_text(gate: Gate) -> str:
    parts = bounds_text(gate.min, gate.max, _fmt)
    if gate.max_relative_drop is not None:
        parts.append(f"drop <= {_fmt(gate.max_relative_drop * 100)}% of {gate.baseline}")
    return " and ".join(parts)


def evaluate_gate(gate: Gate, value: float | None, baseline: Baseline | None) -> GateOutcome:
    """Evaluate one gate on the candidate's value and (for relative gates) the baseline."""
    threshold = threshold_text(gate)

    def outcome(passed: bool, message: str, baseline_value: float | None = None) -> GateOutcome:
        return GateOutcome(gate.metric, value, threshold, baseline_value, passed, message)

    if value is None:
        return outcome(False, f"the evaluator did not report {gate.metric}; log it to the validation run")
    if gate.min is not None and value < gate.min:
        return outcome(False, f"{gate.metric} {_fmt(value)} is below the minimum {_fmt(gate.min)}")
    if gate.max is not None and value > gate.max:
        return outcome(False, f"{gate.metric} {_fmt(value)} is above the maximum {_fmt(gate.max)}")
    if gate.max_relative_drop is None:
        return outcome(True, f"{gate.metric} {_fmt(value)} meets {threshold}")
    base_value = baseline.metrics.get(gate.metric) if baseline and baseline.version else None
    if base_value is None:
        missing = (
            f"baseline {gate.baseline} does not exist yet"
            if not baseline or not baseline.version
            else f"baseline {gate.baseline} (version {baseline.version}) has no {gate.metric}"
        )
        if gate.on_missing_baseline == "pass":
            return outcome(True, f"{missing}: passed by onMissingBaseline=pass")
        return outcome(False, f"{missing}: failed by onMissingBaseline=fail")
    drop = (base_value - value) / abs(base_value) if base_value else 0.0
    if drop > gate.max_relative_drop:
        return outcome(
            False,
            f"{gate.metric} {_fmt(value)} dropped {_fmt(drop * 100)}% from {_fmt(base_value)} of {gate.baseline} "
            f"(version {baseline.version if baseline else '?'}), more than {_fmt(gate.max_relative_drop * 100)}%",
            base_value,
        )
    message = (
        f"{gate.metric} {_fmt(value)} vs {_fmt(base_value)} of {gate.baseline}: drop "
        f"{_fmt(max(drop, 0) * 100)}% within {_fmt(gate.max_relative_drop * 100)}%"
    )
    return outcome(True, message, base_value)


def evaluate_gates(
    gates: list[Gate], metrics: Mapping[str, float], baselines: Mapping[str, Baseline]
) -> list[GateOutcome]:
    """Every gate's outcome; ``baselines`` is keyed by the gate's ``baseline`` reference."""
    return [evaluate_gate(g, metrics.get(g.metric), baselines.get(g.baseline) if g.baseline else None) for g in gates]
