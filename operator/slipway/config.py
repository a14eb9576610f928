"""Operator configuration: flags, with environment variables as defaults (for the Deployment)."""

from __future__ import annotations

import os
import socket
import urllib.parse
from dataclasses import dataclass, field

from slipway.redact import ambiguous_userinfo, redact_url, without_credentials


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value else default


def _env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    return float(value) if value else default


def default_identity() -> str:
    """Who holds the leader Lease: the pod's name (``POD_NAME``, downward API), else host and pid."""
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}_{os.getpid()}"


def parse_list(text: str | None) -> tuple[str, ...]:
    """The items of a comma-separated list, trimmed, empty ones left out."""
    return tuple(item.strip() for item in (text or "").split(",") if item.strip())


def parse_url_list(text: str | None) -> tuple[str, ...]:
    """A comma-separated list of http(s) URLs (``--allowed-prometheus-urls``); ValueError names a bad one."""
    urls = parse_list(text)
    for url in urls:
        try:
            parts = urllib.parse.urlsplit(url)
            valid = parts.scheme in ("http", "https") and bool(parts.hostname)
            parts.port  # noqa: B018 - raises ValueError on a port that is not a number
        except ValueError:
            valid = False
        if not valid:
            raise ValueError(f"{redact_url(url)!r} is not an http(s) URL such as http://prometheus.monitoring:9090")
    return urls


@dataclass(frozen=True)
class OperatorConfig:
    """Everything the operator needs to know about its surroundings."""

    mlflow_url: str | None = field(default_factory=lambda: os.environ.get("SLIPWAY_MLFLOW_URL"))
    # The MLflow address users open in a browser (for status.mlflow.runUrl), if not mlflow_url.
    mlflow_public_url: str | None = field(default_factory=lambda: os.environ.get("SLIPWAY_MLFLOW_PUBLIC_URL"))
    prometheus_url: str | None = field(default_factory=lambda: os.environ.get("SLIPWAY_PROMETHEUS_URL"))
    # The Prometheus addresses a spec may name (spec.rollout.analysis.prometheus.address); the
    # operator's own prometheus_url is always one of them (added here if missing).
    allowed_prometheus_urls: tuple[str, ...] = field(
        default_factory=lambda: parse_url_list(os.environ.get("SLIPWAY_ALLOWED_PROMETHEUS_URLS"))
    )
    # Gateways of other namespaces every namespace's HTTPRoutes may attach to (namespace/name globs,
    # e.g. gateway-system/public); a namespace's slipway.dev/allowed-gateways adds its own.
    allowed_gateways: tuple[str, ...] = field(
        default_factory=lambda: parse_list(os.environ.get("SLIPWAY_ALLOWED_GATEWAYS"))
    )
    # Multi-tenant mode: a namespace without the slipway.dev/allowed-models annotation may use no
    # MLflow model (see slipway.tenancy).
    require_model_allowlist: bool = field(
        default_factory=lambda: os.environ.get("SLIPWAY_REQUIRE_MODEL_ALLOWLIST", "").lower() in ("1", "true", "yes")
    )
    # Workload pods read MLflow credentials from this Secret of their namespace, if it exists; the
    # MLflow address they get carries none (see slipway.redact.without_credentials).
    mlflow_credentials_secret: str = field(
        default_factory=lambda: os.environ.get("SLIPWAY_MLFLOW_CREDENTIALS_SECRET", "slipway-mlflow-credentials")
    )
    # The image of Slipway's own workloads (quantize, validate) when a spec names none.
    workload_image: str = field(
        default_factory=lambda: os.environ.get("SLIPWAY_WORKLOAD_IMAGE", "ghcr.io/slipway-dev/slipway:0.1.0")
    )
    # PriorityClasses of Slipway's pods when a spec names none (manifests/priorityclasses.yaml);
    # "" uses none. Serving preempts training for GPUs.
    training_priority_class: str = field(
        default_factory=lambda: os.environ.get("SLIPWAY_TRAINING_PRIORITY_CLASS", "slipway-training")
    )
    inference_priority_class: str = field(
        default_factory=lambda: os.environ.get("SLIPWAY_INFERENCE_PRIORITY_CLASS", "slipway-inference")
    )
    metrics_port: int = field(default_factory=lambda: _env_int("SLIPWAY_METRICS_PORT", 8080))
    # Where /metrics listens; a pod IP where pods share one network (the local test cluster).
    metrics_address: str = field(default_factory=lambda: os.environ.get("SLIPWAY_METRICS_ADDRESS", "0.0.0.0"))
    http_timeout_seconds: float = 10.0
    # Time is the input: how often a deployment that follows an MLflow alias looks it up, how often
    # a running TrainingRun reads its progress from MLflow, and how often a run queued in Kueue
    # reads its position (0: never). Nothing else polls.
    alias_poll_seconds: float = field(default_factory=lambda: _env_float("SLIPWAY_ALIAS_POLL_SECONDS", 30.0))
    progress_poll_seconds: float = field(default_factory=lambda: _env_float("SLIPWAY_PROGRESS_POLL_SECONDS", 15.0))
    queue_position_seconds: float = field(default_factory=lambda: _env_float("SLIPWAY_QUEUE_POSITION_SECONDS", 60.0))
    # Reconciliation passes at once, each in a thread of its own: one slot is kept for canary
    # decisions and a third of them for new objects' first passes (controller.Slots). A pass mostly
    # waits on the API server and MLflow, so many more than the cores; but not too many: scenario C
    # made Jobs at ~25/s with 12 and at ~20/s with 24 (one run each, bench/RESULTS.md), threads
    # sharing the GIL with the event loop that reads the watches.
    workers: int = field(default_factory=lambda: max(3, _env_int("SLIPWAY_WORKERS", 12)))
    # The price table (slipway.cost): a YAML or JSON file, e.g. mounted from a ConfigMap; none: no prices.
    prices_file: str | None = field(default_factory=lambda: os.environ.get("SLIPWAY_PRICES_FILE") or None)
    # A training pod that cannot run (bad image, missing Secret, crash loop) is Stalled after this.
    stuck_pod_grace_seconds: float = field(default_factory=lambda: _env_float("SLIPWAY_STUCK_POD_GRACE_SECONDS", 300.0))
    # High availability: only the holder of the Lease slipway-operator in this namespace reconciles
    # (see slipway.leader); the others keep their caches warm and stand by.
    leader_election_namespace: str = field(
        default_factory=lambda: (
            os.environ.get("SLIPWAY_LEADER_ELECTION_NAMESPACE") or os.environ.get("POD_NAMESPACE") or "slipway-system"
        )
    )
    leader_election_identity: str = field(default_factory=default_identity)
    # The namespaces watched (-n); empty: every namespace. The cache heal lists only these.
    namespaces: tuple[str, ...] = ()
    lease_duration_seconds: float = field(default_factory=lambda: _env_float("SLIPWAY_LEASE_DURATION_SECONDS", 15.0))
    lease_renew_deadline_seconds: float = field(
        default_factory=lambda: _env_float("SLIPWAY_LEASE_RENEW_DEADLINE_SECONDS", 10.0)
    )
    lease_retry_seconds: float = field(default_factory=lambda: _env_float("SLIPWAY_LEASE_RETRY_SECONDS", 2.0))
    # Liveness (/healthz) fails while a reconciliation pass has run longer than this: a stuck thread.
    stuck_pass_seconds: float = field(default_factory=lambda: _env_float("SLIPWAY_STUCK_PASS_SECONDS", 300.0))

    @property
    def pod_mlflow_url(self) -> str | None:
        """The MLflow address pods get: the operator's, without credentials."""
        return without_credentials(self.mlflow_url) if self.mlflow_url else None

    def __post_init__(self) -> None:
        for flag, url in (("--mlflow-url", self.mlflow_url), ("--mlflow-public-url", self.mlflow_public_url),
                          ("--prometheus-url", self.prometheus_url)):  # fmt: skip
            if url and ambiguous_userinfo(url):
                raise ValueError(
                    f"{flag} {redact_url(url)!r}: its user info holds '/', '?' or '#', which would be read as the "
                    "host or path; percent-encode them (%2F, %3F, %23), or give MLflow's credentials as "
                    "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD"
                )
        own = (self.prometheus_url,) if self.prometheus_url else ()
        allowed = tuple(dict.fromkeys(own + tuple(self.allowed_prometheus_urls)))
        object.__setattr__(self, "allowed_prometheus_urls", allowed)
