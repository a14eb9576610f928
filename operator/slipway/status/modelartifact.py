"""ModelArtifact phase and conditions for each stage of its lifecycle (pure)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from slipway.status.conditions import Cond, ready, reconciling, stalled
from slipway.status.gates import GateOutcome

REGISTERED, QUANTIZED, VALIDATED = "Registered", "Quantized", "Validated"


@dataclass(frozen=True)
class ArtifactState:
    phase: str
    conditions: list[Cond]


def _state(
    phase: str,
    summary: Callable[[str, str], list[Cond]],
    reason: str,
    message: str,
    done: tuple[bool, bool, bool] = (False, False, False),
) -> ArtifactState:
    """Summary conditions plus Registered / Quantized / Validated: True when done, else the current reason."""
    steps = [
        Cond(type_, "True", "Done") if finished else Cond(type_, "False", reason, message)
        for type_, finished in zip((REGISTERED, QUANTIZED, VALIDATED), done, strict=True)
    ]
    return ArtifactState(phase, [*summary(reason, message), *steps])


def waiting_for_source(message: str) -> ArtifactState:
    return _state("Registering", reconciling, "WaitingForSource", message)


def registering(message: str = "registering the model version in MLflow") -> ArtifactState:
    return _state("Registering", reconciling, "Registering", message)


def source_failed(reason: str, message: str) -> ArtifactState:
    return _state("Failed", stalled, reason, message)


def quantizing(message: str) -> ArtifactState:
    return _state("Quantizing", reconciling, "Quantizing", message, (True, False, False))


def validating(message: str) -> ArtifactState:
    return _state("Validating", reconciling, "Validating", message, (True, True, False))


def step_failed(step: str, message: str) -> ArtifactState:
    """The quantize or validate Job failed: a person must look (its logs say why)."""
    if step == "quantize":
        return _state("Failed", stalled, "QuantizationFailed", message, (True, False, False))
    return _state("Failed", stalled, "ValidationFailed", message, (True, True, False))


def decided(outcomes: list[GateOutcome], aliases: list[str], version: str) -> ArtifactState:
    """Validated (aliases moved) or Rejected (the failing gates named, with value and threshold)."""
    failed = [o for o in outcomes if not o.passed]
    if failed:
        reasons = "; ".join(f"gate {o.metric} failed: {o.message} (threshold {o.threshold})" for o in failed)
        return _state("Rejected", stalled, "GateFailed", f"{reasons}; no alias moved", (True, True, False))
    moved = f"; aliases {', '.join(aliases)} point at version {version}" if aliases else ""
    return _state("Validated", ready, "Validated", f"{len(outcomes)} gates passed{moved}", (True, True, True))
