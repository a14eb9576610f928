"""Operator configuration: flags, with environment variables as defaults (for the Deployment). Each
setting, its variable, flag and default, is declared once in slipway.settings."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from slipway import settings
from slipway.redact import ambiguous_userinfo, redact_url, without_credentials
from slipway.settings import parse_list, parse_url_list

__all__ = ["CONFIG_FIELDS", "OperatorConfig", "parse_list", "parse_url_list"]


def _setting(name: str) -> Any:
    """A field whose default is the setting ``name`` (slipway.settings: its variable, else its default)."""
    return field(default_factory=lambda: settings.read(name))


@dataclass(frozen=True)
class OperatorConfig:
    """Everything the operator needs to know about its surroundings."""

    mlflow_url: str | None = _setting("mlflow_url")
    # The MLflow address users open in a browser (for status.mlflow.runUrl), if not mlflow_url.
    mlflow_public_url: str | None = _setting("mlflow_public_url")
    prometheus_url: str | None = _setting("prometheus_url")
    # The Prometheus addresses a spec may name (spec.rollout.analysis.prometheus.address); the
    # operator's own prometheus_url is always one of them (added here if missing).
    allowed_prometheus_urls: tuple[str, ...] = _setting("allowed_prometheus_urls")
    # Gateways of other namespaces every namespace's HTTPRoutes may attach to (namespace/name globs,
    # e.g. gateway-system/public); a namespace's slipway.dev/allowed-gateways adds its own.
    allowed_gateways: tuple[str, ...] = _setting("allowed_gateways")
    # MLflow experiments and registered models (globs) used although Slipway did not make them (no
    # proof, slipway.mlflow.proof), and stamped; a Namespace's slipway.dev/adopt-mlflow-names adds more.
    adopt_mlflow_names: tuple[str, ...] = _setting("adopt_mlflow_names")
    # The Secret (in the operator's namespace) holding the key of the proofs, if not given directly.
    mlflow_proof_secret: str = _setting("mlflow_proof_secret")
    # Label matchers of Traefik's own series (its scrape target's job and namespace), the only ones
    # the analysis preset gateway reads (slipway.inference.providers.gateway_queries).
    traefik_selector: str = _setting("traefik_selector")
    # Multi-tenant mode: a namespace without the slipway.dev/allowed-models annotation may use no
    # MLflow model (see slipway.tenancy).
    require_model_allowlist: bool = _setting("require_model_allowlist")
    # Workload pods read MLflow credentials from this Secret of their namespace, if it exists, unless
    # the Namespace names another (slipway.mlflowcreds; multi-tenant: only then); the MLflow address
    # they get carries none (see slipway.redact.without_credentials).
    mlflow_credentials_secret: str = _setting("mlflow_credentials_secret")
    # The image of Slipway's own workloads (quantize, validate) when a spec names none.
    workload_image: str = _setting("workload_image")
    # The fetch-model init container's image (default: workload_image). Like the MLflow address and
    # the operator's image, no part of a revision: a serving pod gets a new one with its next revision.
    fetch_image: str = _setting("fetch_image")
    # PriorityClasses of Slipway's pods when a spec names none (manifests/priorityclasses.yaml);
    # "" uses none. Serving preempts training for GPUs.
    training_priority_class: str = _setting("training_priority_class")
    inference_priority_class: str = _setting("inference_priority_class")
    metrics_port: int = _setting("metrics_port")
    # Where /metrics listens; a pod IP where pods share one network (the local test cluster).
    metrics_address: str = _setting("metrics_address")
    http_timeout_seconds: float = 10.0
    # Time is the input: how often a deployment that follows an MLflow alias looks it up, how often
    # a running TrainingRun reads its progress from MLflow, and how often a run queued in Kueue
    # reads its position (0: never). Nothing else polls.
    alias_poll_seconds: float = _setting("alias_poll_seconds")
    # While the MLflow webhook is served (a secret is set, see slipway.mlflowhook), alias lookups
    # are only its fallback: startup sets alias_poll_seconds to alias_webhook_poll_seconds. The secret
    # itself is no field here: it is read once at startup and held by the webhook's verifier alone.
    mlflow_webhook_port: int = _setting("mlflow_webhook_port")
    alias_webhook_poll_seconds: float = _setting("alias_webhook_poll_seconds")
    progress_poll_seconds: float = _setting("progress_poll_seconds")
    queue_position_seconds: float = _setting("queue_position_seconds")
    # Reconciliation passes at once, each in a thread of its own: one slot is kept for canary
    # decisions and a third of them for new objects' first passes (controller.Slots). A pass mostly
    # waits on the API server and MLflow, so many more than the cores; but not too many: scenario C
    # made Jobs at ~25/s with 12 and at ~20/s with 24 (one run each, bench/RESULTS.md), threads
    # sharing the GIL with the event loop that reads the watches.
    workers: int = _setting("workers")
    # The price table (slipway.cost): a YAML or JSON file, e.g. mounted from a ConfigMap; none: no prices.
    prices_file: str | None = _setting("prices_file")
    # A training pod that cannot run (bad image, missing Secret, crash loop) is Stalled after this.
    stuck_pod_grace_seconds: float = _setting("stuck_pod_grace_seconds")
    # High availability: only the holder of the Lease slipway-operator in this namespace reconciles
    # (see slipway.leader); the others keep their caches warm and stand by.
    leader_election_namespace: str = _setting("leader_election_namespace")
    leader_election_identity: str = _setting("leader_election_identity")
    # The namespaces watched (-n); empty: every namespace. The cache heal lists only these.
    namespaces: tuple[str, ...] = ()
    lease_duration_seconds: float = _setting("lease_duration_seconds")
    lease_renew_deadline_seconds: float = _setting("lease_renew_deadline_seconds")
    lease_retry_seconds: float = _setting("lease_retry_seconds")
    # Liveness (/healthz) fails while a reconciliation pass has run longer than this: a stuck thread.
    stuck_pass_seconds: float = _setting("stuck_pass_seconds")
    # A ModelArtifact's model with more files or directories than this is Stalled (TooManyFiles).
    max_digest_files: int = _setting("max_digest_files")

    @property
    def pod_mlflow_url(self) -> str | None:
        """The MLflow address pods get: the operator's, without credentials."""
        return without_credentials(self.mlflow_url) if self.mlflow_url else None

    def __post_init__(self) -> None:
        for flag, url in (
            ("--mlflow-url", self.mlflow_url),
            ("--mlflow-public-url", self.mlflow_public_url),
            ("--prometheus-url", self.prometheus_url),
        ):
            if url and ambiguous_userinfo(url):
                raise ValueError(
                    f"{flag} {redact_url(url)!r}: its user info holds '/', '?' or '#', which would be read as the "
                    "host or path; percent-encode them (%2F, %3F, %23), or give MLflow's credentials as "
                    "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD"
                )
        own = (self.prometheus_url,) if self.prometheus_url else ()
        allowed = tuple(dict.fromkeys(own + tuple(self.allowed_prometheus_urls)))
        object.__setattr__(self, "allowed_prometheus_urls", allowed)


CONFIG_FIELDS = frozenset(f.name for f in fields(OperatorConfig))
