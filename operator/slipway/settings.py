"""The operator's settings, each declared once: its name (the OperatorConfig field), environment
variable, flag, default and help. ``OperatorConfig`` takes its defaults from here, ``python -m
slipway`` builds its flags and their ``--help`` from here (a flag defaults to its variable; its help
names the variables and the default), and ``docs/reference/settings.md`` is generated from here
(``python -m slipway.reference``). A setting's help is its one description: OperatorConfig's fields
carry none of their own. The environment is read in one function, :func:`read`; an empty variable
counts as unset.

Kept light (no kopf, no Kubernetes client): ``python -m slipway --help`` imports it.
"""

from __future__ import annotations

import argparse
import os
import socket
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from slipway import labelmatchers
from slipway._version import __version__
from slipway.redact import redact_url

# Traefik's own series (the analysis preset gateway), as the local cluster scrapes it: a static
# target of the job "gateway", without the namespace label pod discovery gives. A pod exporting
# traefik_service_requests_total itself is scraped under its own job (its "job" label renamed
# exported_job unless the scrape honours labels) and with its namespace: it is never counted.
TRAEFIK_SELECTOR = 'job="gateway",namespace=""'


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


def parse_selector(text: str) -> str:
    """Label matchers of a scrape target (``job="traefik",namespace="traefik"``), in one normal form."""
    return labelmatchers.check(text, "the selector")


def parse_bool(text: str) -> bool:
    return text.strip().lower() in ("1", "true", "yes")


def _host_and_pid() -> str:
    return f"{socket.gethostname()}_{os.getpid()}"


@dataclass(frozen=True)
class Setting:
    name: str  # the OperatorConfig field (or, for a flag only the command reads, its own name)
    env: tuple[str, ...]  # the variables read, first set one wins; () for a flag only
    default: Any  # when no variable is set (a callable is called)
    help: str
    flag: str | None = None  # None: environment only
    parse: Callable[[str], Any] = str
    metavar: str | None = None
    group: str = ""  # a flag's group in --help
    shown_default: str | None = None  # the default as the docs say it, if not its value
    empty: bool = False  # an empty variable is a value (a name, an address), not unset
    short: str | None = None  # the flag's one-letter form

    @property
    def dest(self) -> str:
        """The flag's attribute in argparse's namespace."""
        return (self.flag or self.name).lstrip("-").replace("-", "_")

    @property
    def bool_flag(self) -> bool:
        return self.parse is parse_bool


LEADER = "leader election"
LEADER_HELP = (
    "Replicas share a coordination.k8s.io/v1 Lease named slipway-operator: its holder reconciles, the "
    "others stand by with warm caches and take over when it is not renewed for the lease duration."
)


def _s(name: str, env: str, default: Any, help: str, flag: str | None = None, **kw: Any) -> Setting:
    return Setting(name, tuple(env.split()), default, help, flag, **kw)


def _tls_settings(service: str, server: str) -> tuple[Setting, ...]:
    """The CA bundle, client certificate and key, and insecure switch of the operator's client of ``service``."""
    flag, env, group = f"--{service}-", f"SLIPWAY_{service.upper()}_", "TLS"
    pods = "; Slipway's pods get MLFLOW_TRACKING_INSECURE_TLS=true" if service == "mlflow" else ""
    return (
        _s(
            f"{service}_ca_bundle",
            f"{env}CA_BUNDLE",
            None,
            f"a PEM file of the CA certificates that the certificate of {server} is checked against, instead of the "
            "image's (a private CA); read again when it changes",
            f"{flag}ca-bundle",
            metavar="FILE",
            group=group,
        ),
        _s(
            f"{service}_client_cert",
            f"{env}CLIENT_CERT",
            None,
            f"a PEM file of the client certificate the operator presents to {server} (mutual TLS), with its key "
            f"unless {flag}client-key names another file; read again when it changes",
            f"{flag}client-cert",
            metavar="FILE",
            group=group,
        ),
        _s(
            f"{service}_client_key",
            f"{env}CLIENT_KEY",
            None,
            "a PEM file of the client certificate's key, unencrypted",
            f"{flag}client-key",
            metavar="FILE",
            group=group,
        ),
        _s(
            f"{service}_insecure_tls",
            f"{env}INSECURE_TLS",
            False,
            f"skip checking the certificate of {server}: anyone on the way can read and change what is exchanged "
            f"(for a trial only; the operator warns at start){pods}",
            f"{flag}insecure-tls",
            parse=parse_bool,
            group=group,
        ),
    )


# fmt: off
SETTINGS: tuple[Setting, ...] = (
    _s("standalone", "", False, "no leader election: this replica always reconciles (one replica only, tests)",
       "--standalone", parse=parse_bool),
    _s("leader_election_namespace", "SLIPWAY_LEADER_ELECTION_NAMESPACE POD_NAMESPACE", "slipway-system",
       "namespace of the Lease", "--leader-election-namespace",
       group=LEADER),
    _s("lease_duration_seconds", "SLIPWAY_LEASE_DURATION_SECONDS", 15.0,
       "a Lease not renewed for this long may be taken over", "--lease-duration", parse=float,
       metavar="SECONDS", group=LEADER),
    _s("lease_renew_deadline_seconds", "SLIPWAY_LEASE_RENEW_DEADLINE_SECONDS", 10.0,
       "a leader whose last successful renewal was sent this long ago has lost the Lease and exits, before anyone "
       "may take over", "--lease-renew-deadline", parse=float, metavar="SECONDS", group=LEADER),
    _s("lease_retry_seconds", "SLIPWAY_LEASE_RETRY_SECONDS", 2.0,
       "how often the leader renews the Lease and a standby reads it", "--lease-retry-period",
       parse=float, metavar="SECONDS", group=LEADER),
    _s("lease_renew_interval", "", None, argparse.SUPPRESS, "--lease-renew-interval", parse=float, metavar="SECONDS",
       group=LEADER),  # the flag of earlier versions: deadline = duration - interval
    _s("leader_election_identity", "POD_NAME", _host_and_pid, "who holds the leader Lease: the pod's name "
       "(downward API)", shown_default="host_pid"),
    _s("stuck_pass_seconds", "SLIPWAY_STUCK_PASS_SECONDS", 300.0, "the liveness endpoint fails while a "
       "reconciliation pass runs for longer (a stuck thread)", "--stuck-pass-seconds", parse=float,
       metavar="SECONDS"),
    _s("mlflow_url", "SLIPWAY_MLFLOW_URL", None, "MLflow tracking server", "--mlflow-url", empty=True),
    _s("mlflow_public_url", "SLIPWAY_MLFLOW_PUBLIC_URL", None, "MLflow address for links in status (default: "
       "--mlflow-url)", "--mlflow-public-url", empty=True),
    _s("prices_file", "SLIPWAY_PRICES_FILE", None, "the price table (YAML or JSON: currency, gpuHour, cpuHour, "
       "memoryGiBHour), read again when it changes; none: costs say no price is configured", "--prices-file",
       metavar="FILE"),
    _s("prometheus_url", "SLIPWAY_PROMETHEUS_URL", None, "default Prometheus for canary analysis",
       "--prometheus-url", empty=True),
    *_tls_settings("mlflow", "MLflow"),
    *_tls_settings("prometheus", "every Prometheus the operator queries (--prometheus-url, --allowed-prometheus-urls)"),
    _s("require_model_allowlist", "SLIPWAY_REQUIRE_MODEL_ALLOWLIST", False, "multi-tenant mode: a namespace may "
       "use only the MLflow models its slipway.dev/allowed-models annotation lists (comma-separated globs, set by "
       "cluster admins); none without it", "--require-model-allowlist", parse=parse_bool),
    _s("allowed_gateways", "SLIPWAY_ALLOWED_GATEWAYS", (), "comma-separated namespace/name globs of Gateways in "
       "other namespaces that any spec.traffic.parentRefs may name (a namespace's slipway.dev/allowed-gateways adds "
       "more; a Gateway of the object's own namespace is always allowed)", "--allowed-gateways", parse=parse_list,
       shown_default=""),
    _s("allowed_prometheus_urls", "SLIPWAY_ALLOWED_PROMETHEUS_URLS", (), "comma-separated Prometheus addresses a "
       "spec may name in spec.rollout.analysis.prometheus.address (default: only --prometheus-url, which is always "
       "allowed)", "--allowed-prometheus-urls", parse=parse_url_list, shown_default=""),
    _s("traefik_selector", "SLIPWAY_TRAEFIK_SELECTOR", TRAEFIK_SELECTOR, "label matchers of Traefik's own series, "
       "its scrape target's job and namespace (e.g. job=\"traefik\",namespace=\"traefik\"), read by the analysis "
       "preset gateway: series of any other target (a pod exporting traefik_service_requests_total) are never counted",
       "--traefik-selector", parse=parse_selector, metavar="MATCHERS"),
    _s("metrics_port", "SLIPWAY_METRICS_PORT", 8080, "port of the operator's own /metrics (0 disables)",
       "--metrics-port", parse=int),
    _s("liveness", "SLIPWAY_LIVENESS", "http://0.0.0.0:8081/healthz", "kopf's liveness endpoint URL", "--liveness",
       empty=True),
    _s("verbose", "", False, "log more", "--verbose", parse=parse_bool, short="-v"),
    _s("metrics_address", "SLIPWAY_METRICS_ADDRESS", "0.0.0.0", "where /metrics listens; a pod IP where pods "
       "share one network (the local test cluster)", empty=True),
    _s("mlflow_credentials_secret", "SLIPWAY_MLFLOW_CREDENTIALS_SECRET", "slipway-mlflow-credentials", "workload "
       "pods read MLflow credentials from this Secret of their namespace, if it exists, unless the Namespace's "
       "slipway.dev/mlflow-credentials annotation names another (in multi-tenant mode, only then do they get any); "
       "the MLflow address they get carries none", empty=True),
    _s("mlflow_ca_configmap", "SLIPWAY_MLFLOW_CA_CONFIGMAP", "", "a ConfigMap of each namespace whose key ca.crt "
       "(PEM) is the CA bundle Slipway's pods check MLflow's certificate against (MLFLOW_TRACKING_SERVER_CERT_PATH): "
       "mounted by reference into the containers that talk to MLflow, where it exists (trust-manager can put one in "
       "every namespace); empty: none", empty=True, shown_default=""),
    _s("mlflow_client_cert_secret", "SLIPWAY_MLFLOW_CLIENT_CERT_SECRET", "", "a Secret of each namespace whose key "
       "tls-combined.pem (the client certificate and its unencrypted key, PEM; cert-manager's CombinedPEM output) "
       "Slipway's pods present to MLflow (MLFLOW_TRACKING_CLIENT_CERT_PATH): mounted by reference into the containers "
       "that talk to MLflow, where it exists; empty: none", empty=True, shown_default=""),
    _s("workload_image", "SLIPWAY_WORKLOAD_IMAGE", f"ghcr.io/slipway-dev/slipway-workloads:{__version__}",
       "the image of Slipway's own workloads (quantize, validate) when a spec names none", empty=True),
    _s("fetch_image", "SLIPWAY_FETCH_IMAGE", "", "the image of the fetch-model init container of serving pods with "
       "spec.modelLoad (default: the workload image); no part of a revision: a new one reaches pods with their "
       "next revision", empty=True, shown_default=""),
    _s("training_priority_class", "SLIPWAY_TRAINING_PRIORITY_CLASS", "slipway-training", "PriorityClass of "
       "training pods when a spec names none (manifests/priorityclasses.yaml); empty: none", empty=True),
    _s("inference_priority_class", "SLIPWAY_INFERENCE_PRIORITY_CLASS", "slipway-inference", "PriorityClass of "
       "serving pods when a spec names none (above training's: serving preempts training for GPUs); empty: none",
       empty=True),
    _s("alias_poll_seconds", "SLIPWAY_ALIAS_POLL_SECONDS", 30.0, "how often a deployment that follows an MLflow "
       "alias looks it up (0: never), while no MLflow webhook is served", parse=float),
    _s("mlflow_webhook_secret", "SLIPWAY_MLFLOW_WEBHOOK_SECRET", "", "the secret MLflow signs its registry "
       "webhook deliveries with (the chart's mlflow.webhookSecret names the Secret it comes from); set, the operator "
       "serves the webhook and an alias moved in MLflow wakes the deployments following it at once. Never logged",
       shown_default=""),
    _s("mlflow_proof_key", "SLIPWAY_MLFLOW_PROOF_KEY", "", "the key the operator signs what it creates in MLflow "
       "with (experiments, registered models, runs, versions: the tag slipway.dev/proof); unset, it is read from "
       "--mlflow-proof-secret, which the operator creates if missing. Never logged", shown_default=""),
    _s("mlflow_proof_secret", "SLIPWAY_MLFLOW_PROOF_SECRET", "slipway-mlflow-proof", "the Secret, in the operator's "
       "namespace (--leader-election-namespace), whose key 'key' holds the MLflow proof key; created with a random "
       "key when missing", "--mlflow-proof-secret", empty=True),
    _s("adopt_mlflow_names", "SLIPWAY_ADOPT_MLFLOW_NAMES", (), "comma-separated globs of MLflow experiments and "
       "registered models that Slipway uses although it did not create them (no slipway.dev/proof tag), stamping "
       "them as its own; a Namespace's slipway.dev/adopt-mlflow-names adds more for that namespace",
       "--adopt-mlflow-names", parse=parse_list, shown_default=""),
    _s("mlflow_webhook_port", "SLIPWAY_MLFLOW_WEBHOOK_PORT", 8082, "port of the MLflow webhook endpoint "
       "(POST /mlflow/webhook, on --metrics-address), served while a webhook secret is set (0: never)", parse=int),
    _s("alias_webhook_poll_seconds", "SLIPWAY_ALIAS_WEBHOOK_POLL_SECONDS", 300.0, "how often a deployment that "
       "follows an MLflow alias looks it up while the webhook is served (instead of alias_poll_seconds): the "
       "fallback for a lost delivery", parse=float),
    _s("progress_poll_seconds", "SLIPWAY_PROGRESS_POLL_SECONDS", 15.0, "how often a running TrainingRun reads its "
       "progress from MLflow (0: never)", parse=float),
    _s("queue_position_seconds", "SLIPWAY_QUEUE_POSITION_SECONDS", 60.0, "how often a run queued in Kueue reads "
       "its position (0: never)", parse=float),
    # A pass mostly waits on the API server and MLflow, so many more workers than cores; but not too many:
    # scenario C made Jobs at ~25/s with 12 and at ~20/s with 24 (one run each, bench/RESULTS.md), threads
    # sharing the GIL with the event loop that reads the watches.
    _s("workers", "SLIPWAY_WORKERS", 12, "reconciliation passes at once, each in a thread (at least 3: one slot "
       "is kept for canary decisions, a third for new objects' first passes)", parse=lambda text: max(3, int(text))),
    _s("stuck_pod_grace_seconds", "SLIPWAY_STUCK_POD_GRACE_SECONDS", 300.0, "a training pod that cannot run (bad "
       "image, missing Secret, crash loop) is Stalled after this", parse=float),
    _s("max_digest_files", "SLIPWAY_MAX_DIGEST_FILES", 10_000, "a ModelArtifact's model with more files (or "
       "directories) than this is not registered: Stalled, reason TooManyFiles (Slipway digests every file of a "
       "model it registers, a few seconds of each pass at a time)", "--max-digest-files", parse=int),
)
# fmt: on
BY_NAME = {s.name: s for s in SETTINGS}


def _text(setting: Setting, environ: Mapping[str, str]) -> str | None:
    """The first variable of the setting that is set (non-empty, unless empty is a value), else None."""
    return next((environ[e] for e in setting.env if e in environ and (environ[e] or setting.empty)), None)


def _default(setting: Setting) -> Any:
    return setting.default() if callable(setting.default) else setting.default


def shown_default(setting: Setting) -> str:
    """The default as the flag's help and the settings page say it ("" for none)."""
    shown = setting.shown_default if setting.shown_default is not None else _default(setting)
    return "" if shown is None else str(shown)


def flag_help(setting: Setting) -> str:
    """A flag's ``--help``: the setting's help, then its variables (first set one wins) and its default."""
    if setting.help == argparse.SUPPRESS:
        return setting.help
    notes = [" else ".join(f"${e}" for e in setting.env)] if setting.env else []
    if not setting.bool_flag and shown_default(setting):
        notes.append(f"default {shown_default(setting)}")
    text = setting.help + (f" ({'; '.join(notes)})" if notes else "")
    return text.replace("%", "%%")  # argparse formats a help with %


def read(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """A setting's value from the environment, else its default; a bad value raises ValueError
    naming the variable."""
    setting = BY_NAME[name]
    text = _text(setting, os.environ if environ is None else environ)
    if text is None:
        return _default(setting)
    try:
        return setting.parse(text)
    except ValueError as exc:
        raise ValueError(f"{'/'.join(setting.env)}: {exc}") from None


def _flag_type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = getattr(parse, "__name__", "value")  # argparse names it in "invalid int value"
    return convert


def add_flags(parser: argparse.ArgumentParser, environ: Mapping[str, str] | None = None) -> None:
    """Every setting with a flag, its default the variable's text (argparse parses a string default as
    it parses the flag, so a bad variable is refused naming the flag) or the setting's default."""
    environ = os.environ if environ is None else environ
    groups: dict[str, argparse._ActionsContainer] = {"": parser}
    for s in SETTINGS:
        if s.flag is None:
            continue
        if s.group not in groups:
            groups[s.group] = parser.add_argument_group(s.group, LEADER_HELP if s.group == LEADER else None)
        names = [s.short, s.flag] if s.short else [s.flag]
        text = _text(s, environ)
        if s.bool_flag:
            default = parse_bool(text) if text is not None else _default(s)
            groups[s.group].add_argument(*names, dest=s.dest, action="store_true", default=default, help=flag_help(s))
            continue
        kw: dict[str, Any] = {"metavar": s.metavar} if s.metavar else {}
        if s.parse is not str:  # int and float as they are: argparse says "invalid int value: 'x'"
            kw["type"] = s.parse if s.parse in (int, float) else _flag_type(s.parse)
        default = text if text is not None else _default(s)
        groups[s.group].add_argument(*names, dest=s.dest, default=default, help=flag_help(s), **kw)


def markdown() -> str:
    lines = [
        "# Operator settings",
        "",
        "<!-- Generated from operator/slipway/settings.py by `make reference`: do not edit by hand. -->",
        "",
        "`python -m slipway` (the operator's container) takes each setting as a flag or, in its Deployment, as an",
        "environment variable: a flag wins over its variable. An empty variable counts as unset, except where it is",
        "marked *empty is a value* (a name or an address): an empty PriorityClass, for one, uses none. Settings",
        "without a flag are set by their variable alone; of two variables, the first one set wins. `-n NAMESPACE`",
        "(repeatable) watches those namespaces, `-A` every namespace (the default). `python -m slipway --help`",
        "says the same of each flag.",
        "",
        "| setting | flag | environment | default | what it does |",
        "|---|---|---|---|---|",
    ]
    for s in SETTINGS:
        if s.help == argparse.SUPPRESS:
            continue
        default = f"`{shown_default(s)}`" if shown_default(s) else ""
        flag = f"`{s.flag}`" if s.flag else ""
        env = ", ".join(f"`{e}`" for e in s.env) + (" *empty is a value*" if s.empty else "")
        lines.append(f"| {s.name} | {flag} | {env} | {default} | {s.help} |")
    return "\n".join(lines) + "\n"


def named(name: str) -> str:
    """How a message names a setting, so that a refusal its value caused says where to change it:
    ``--max-digest-files (SLIPWAY_MAX_DIGEST_FILES)``, or the variable alone for a setting with no flag."""
    setting = BY_NAME[name]
    env = setting.env[0] if setting.env else ""
    return f"{setting.flag} ({env})" if setting.flag and env else setting.flag or env
