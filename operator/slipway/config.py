"""Operator configuration: flags, with environment variables as defaults (for the Deployment)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value else default


def _env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    return float(value) if value else default


@dataclass(frozen=True)
class OperatorConfig:
    """Everything the operator needs to know about its surroundings."""

    mlflow_url: str | None = field(default_factory=lambda: os.environ.get("SLIPWAY_MLFLOW_URL"))
    # The MLflow address users open in a browser (for status.mlflow.runUrl), if not mlflow_url.
    mlflow_public_url: str | None = field(default_factory=lambda: os.environ.get("SLIPWAY_MLFLOW_PUBLIC_URL"))
    prometheus_url: str | None = field(default_factory=lambda: os.environ.get("SLIPWAY_PROMETHEUS_URL"))
    # The image of Slipway's own workloads (quantize, validate) when a spec names none.
    workload_image: str = field(
        default_factory=lambda: os.environ.get("SLIPWAY_WORKLOAD_IMAGE", "ghcr.io/slipway-dev/slipway:0.1.0")
    )
    metrics_port: int = field(default_factory=lambda: _env_int("SLIPWAY_METRICS_PORT", 8080))
    # Where /metrics listens; a pod IP where pods share one network (the local test cluster).
    metrics_address: str = field(default_factory=lambda: os.environ.get("SLIPWAY_METRICS_ADDRESS", "0.0.0.0"))
    http_timeout_seconds: float = 10.0
    # Time is the input: how often a deployment that follows an MLflow alias looks it up, and how
    # often a running TrainingRun reads its progress from MLflow. Nothing else polls.
    alias_poll_seconds: float = field(default_factory=lambda: _env_float("SLIPWAY_ALIAS_POLL_SECONDS", 30.0))
    progress_poll_seconds: float = field(default_factory=lambda: _env_float("SLIPWAY_PROGRESS_POLL_SECONDS", 15.0))
