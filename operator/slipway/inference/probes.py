"""The server container's probes: Slipway's defaults (a startup probe that lets a large model load),
the paths each server preset answers, and what spec.probes overrides."""

from __future__ import annotations

from typing import Any

from slipway.inference.model import InferenceDeploymentSpec

# Probe defaults: a startup probe lets a large model load for 30 minutes (every 10 s, 180 failures)
# before liveness may restart the server; readiness is quick to take and to shed traffic.
PROBE_DEFAULTS: dict[str, dict[str, int]] = {
    "startup": {"periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 180},
    "readiness": {"periodSeconds": 2, "failureThreshold": 2},
    "liveness": {"periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 3},
}
_PROBE_FIELDS = {
    "initial_delay_seconds": "initialDelaySeconds",
    "period_seconds": "periodSeconds",
    "timeout_seconds": "timeoutSeconds",
    "failure_threshold": "failureThreshold",
}


def readiness_path(spec: InferenceDeploymentSpec) -> str:
    """vLLM answers /health; Slipway's reference server /readyz."""
    analysis = spec.rollout.analysis
    return "/health" if analysis is not None and analysis.preset == "vllm" else "/readyz"


def liveness_path(spec: InferenceDeploymentSpec) -> str:
    return "/healthz" if readiness_path(spec) == "/readyz" else "/health"


def probe(spec: InferenceDeploymentSpec, kind: str) -> dict[str, Any]:
    """The ``kind`` probe (startup, readiness, liveness): Slipway's defaults, then what spec.probes sets."""
    default_path = readiness_path(spec) if kind == "readiness" else liveness_path(spec)
    custom = getattr(spec.probes, kind) if spec.probes else None
    body: dict[str, Any] = {
        "httpGet": {"path": (custom and custom.path) or default_path, "port": (custom and custom.port) or spec.port},
        **PROBE_DEFAULTS[kind],
    }
    if custom is not None:
        body |= {key: getattr(custom, attr) for attr, key in _PROBE_FIELDS.items() if getattr(custom, attr) is not None}
    return body
