"""Operator configuration: flags, with environment variables as defaults (for the Deployment). Each
setting, its variable, flag, default and help, is declared once in slipway.settings."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from slipway import settings, tls
from slipway.podspec import PodTls
from slipway.redact import ambiguous_userinfo, redact_url, without_credentials
from slipway.settings import parse_list, parse_url_list

__all__ = ["CONFIG_FIELDS", "OperatorConfig", "parse_list", "parse_url_list"]


def _setting(name: str) -> Any:
    """A field whose default is the setting ``name`` (slipway.settings: its variable, else its default)."""
    return field(default_factory=lambda: settings.read(name))


@dataclass(frozen=True)
class OperatorConfig:
    """Everything the operator needs to know about its surroundings. Each field but
    ``http_timeout_seconds`` and ``namespaces`` is a setting of slipway.settings, described there
    once: its help is the flag's ``--help`` and its row of docs/reference/settings.md. While the MLflow
    webhook is served, startup sets alias_poll_seconds to alias_webhook_poll_seconds; the webhook's
    secret is no field: it is read once at startup and held by the webhook's verifier alone."""

    mlflow_url: str | None = _setting("mlflow_url")
    mlflow_public_url: str | None = _setting("mlflow_public_url")
    prometheus_url: str | None = _setting("prometheus_url")
    allowed_prometheus_urls: tuple[str, ...] = _setting("allowed_prometheus_urls")
    allowed_gateways: tuple[str, ...] = _setting("allowed_gateways")
    adopt_mlflow_names: tuple[str, ...] = _setting("adopt_mlflow_names")
    mlflow_proof_secret: str = _setting("mlflow_proof_secret")
    traefik_selector: str = _setting("traefik_selector")
    require_model_allowlist: bool = _setting("require_model_allowlist")
    mlflow_credentials_secret: str = _setting("mlflow_credentials_secret")
    workload_image: str = _setting("workload_image")
    fetch_image: str = _setting("fetch_image")
    training_priority_class: str = _setting("training_priority_class")
    inference_priority_class: str = _setting("inference_priority_class")
    metrics_port: int = _setting("metrics_port")
    metrics_address: str = _setting("metrics_address")
    http_timeout_seconds: float = 10.0
    alias_poll_seconds: float = _setting("alias_poll_seconds")
    mlflow_webhook_port: int = _setting("mlflow_webhook_port")
    alias_webhook_poll_seconds: float = _setting("alias_webhook_poll_seconds")
    progress_poll_seconds: float = _setting("progress_poll_seconds")
    queue_position_seconds: float = _setting("queue_position_seconds")
    workers: int = _setting("workers")
    prices_file: str | None = _setting("prices_file")
    stuck_pod_grace_seconds: float = _setting("stuck_pod_grace_seconds")
    leader_election_namespace: str = _setting("leader_election_namespace")
    leader_election_identity: str = _setting("leader_election_identity")
    # The namespaces watched (-n); empty: every namespace. The cache heal lists only these.
    namespaces: tuple[str, ...] = ()
    lease_duration_seconds: float = _setting("lease_duration_seconds")
    lease_renew_deadline_seconds: float = _setting("lease_renew_deadline_seconds")
    lease_retry_seconds: float = _setting("lease_retry_seconds")
    stuck_pass_seconds: float = _setting("stuck_pass_seconds")
    max_digest_files: int = _setting("max_digest_files")
    mlflow_ca_bundle: str | None = _setting("mlflow_ca_bundle")
    mlflow_client_cert: str | None = _setting("mlflow_client_cert")
    mlflow_client_key: str | None = _setting("mlflow_client_key")
    mlflow_insecure_tls: bool = _setting("mlflow_insecure_tls")
    mlflow_ca_configmap: str = _setting("mlflow_ca_configmap")
    mlflow_client_cert_secret: str = _setting("mlflow_client_cert_secret")
    prometheus_ca_bundle: str | None = _setting("prometheus_ca_bundle")
    prometheus_client_cert: str | None = _setting("prometheus_client_cert")
    prometheus_client_key: str | None = _setting("prometheus_client_key")
    prometheus_insecure_tls: bool = _setting("prometheus_insecure_tls")

    @property
    def pod_mlflow_url(self) -> str | None:
        """The MLflow address pods get: the operator's, without credentials."""
        return without_credentials(self.mlflow_url) if self.mlflow_url else None

    @property
    def mlflow_tls(self) -> tls.TlsOptions:
        """What the operator's MLflow client checks and presents (--mlflow-ca-bundle, ...)."""
        return tls.TlsOptions(
            self.mlflow_ca_bundle,
            self.mlflow_client_cert,
            self.mlflow_client_key,
            self.mlflow_insecure_tls,
            tls.setting_names("mlflow"),
        )

    @property
    def prometheus_tls(self) -> tls.TlsOptions:
        """What the operator's Prometheus clients check and present (--prometheus-ca-bundle, ...)."""
        return tls.TlsOptions(
            self.prometheus_ca_bundle,
            self.prometheus_client_cert,
            self.prometheus_client_key,
            self.prometheus_insecure_tls,
            tls.setting_names("prometheus"),
        )

    @property
    def pod_mlflow_tls(self) -> PodTls:
        """What Slipway's pods that talk to MLflow mount and are told of TLS."""
        return PodTls(self.mlflow_ca_configmap, self.mlflow_client_cert_secret, self.mlflow_insecure_tls)

    def check_tls(self) -> None:
        """A ValueError naming the setting when a TLS file cannot be used or two settings contradict
        (checked at start, before any client is made)."""
        for options in (self.mlflow_tls, self.prometheus_tls):
            if options.configured:
                tls.TlsContext(options)

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
        # The operator's own Prometheus is always one a spec may name.
        own = (self.prometheus_url,) if self.prometheus_url else ()
        allowed = tuple(dict.fromkeys(own + tuple(self.allowed_prometheus_urls)))
        object.__setattr__(self, "allowed_prometheus_urls", allowed)


CONFIG_FIELDS = frozenset(f.name for f in fields(OperatorConfig))
