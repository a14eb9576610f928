"""Prometheus, discovering pods through the local API server (``kubernetes_sd_configs``).

Debian's ``prometheus`` package cannot do this (Debian removed Kubernetes
service discovery in 1.5.0 because of its dependencies), so localkube runs
upstream Prometheus built from the Go module proxy with only Kubernetes
discovery (``e2e/controlplane/build-prometheus.sh``, into
``.cache/prometheus/prometheus``; ``$LOCALKUBE_PROMETHEUS`` overrides).

Pods are scraped when annotated ``prometheus.io/scrape: "true"``; the port and
path come from ``prometheus.io/port`` and ``prometheus.io/path`` (default
``/metrics``). Pod labels become metric labels, plus ``namespace``, ``pod`` and
``node``. Slipway's operator pods have a job of their own with ``honor_labels``. Pods of kwok's
fake nodes (named ``kwok-*``, see ``bench/kwok.py``) are never scraped: nothing runs behind
their addresses.
Service discovery authenticates with its own client certificate (user
``localkube:prometheus``, allowed to list and watch pods).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import yaml

from localkube.pki import CertPair
from localkube.state import ROOT

PROMETHEUS_BIN = ROOT / ".cache" / "prometheus" / "prometheus"


def binary() -> Path:
    """The Prometheus binary to run; raises FileNotFoundError with the command that builds it."""
    path = Path(os.environ.get("LOCALKUBE_PROMETHEUS", PROMETHEUS_BIN))
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is missing: run `make prometheus` (bash e2e/controlplane/build-prometheus.sh {PROMETHEUS_BIN}); "
            "Debian's prometheus has no kubernetes_sd_configs"
        )
    return path


FAKE_NODES = "kwok-.*"
"""Nodes whose pods are never scraped: kwok's (``bench/kwok.py``), where no container runs."""

OPERATOR_POD_LABELS = ("__meta_kubernetes_pod_label_app_kubernetes_io_name",
                       "__meta_kubernetes_pod_label_app_kubernetes_io_component")  # fmt: skip


def scrape_config(apiserver_url: str, ca: Path, client: CertPair, operator: bool = False) -> dict[str, object]:
    """The ``kubernetes-pods`` scrape job, or (``operator``) the ``slipway-operator`` job: the
    operator's pods, with ``honor_labels`` as manifests/monitoring/servicemonitor.yaml has it, so
    the per-object gauges keep the object's ``namespace``."""
    operator_pods = {"source_labels": list(OPERATOR_POD_LABELS), "regex": "slipway;operator",
                     "action": "keep" if operator else "drop"}  # fmt: skip
    return {
        "job_name": "slipway-operator" if operator else "kubernetes-pods",
        **({"honor_labels": True} if operator else {}),
        "kubernetes_sd_configs": [
            {
                "role": "pod",
                "api_server": apiserver_url,
                "tls_config": {"ca_file": str(ca), "cert_file": str(client.cert), "key_file": str(client.key)},
            }
        ],
        "relabel_configs": [
            {
                "source_labels": ["__meta_kubernetes_pod_annotation_prometheus_io_scrape"],
                "action": "keep",
                "regex": "true",
            },
            operator_pods,
            {"source_labels": ["__meta_kubernetes_pod_node_name"], "action": "drop", "regex": FAKE_NODES},
            {
                "source_labels": ["__meta_kubernetes_pod_phase"],
                "action": "drop",
                "regex": "Succeeded|Failed",
            },
            {
                "source_labels": ["__meta_kubernetes_pod_annotation_prometheus_io_path"],
                "action": "replace",
                "regex": "(.+)",
                "target_label": "__metrics_path__",
            },
            {
                "source_labels": ["__address__", "__meta_kubernetes_pod_annotation_prometheus_io_port"],
                "action": "replace",
                "regex": r"([^:]+)(?::\d+)?;(\d+)",
                "replacement": "$1:$2",
                "target_label": "__address__",
            },
            {"action": "labelmap", "regex": "__meta_kubernetes_pod_label_(.+)"},
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "node"},
        ],
    }


def write_config(path: Path, apiserver_url: str, ca: Path, client: CertPair, scrape_interval: str = "5s") -> Path:
    """Write ``prometheus.yml``; return its path."""
    doc = {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
        "scrape_configs": [
            scrape_config(apiserver_url, ca, client),
            scrape_config(apiserver_url, ca, client, operator=True),
        ],  # fmt: skip
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def load_rules(config: Path, url: str, groups: list[dict[str, Any]]) -> Path:
    """Write rule ``groups`` beside ``config``, point the config at them and reload Prometheus
    (it runs with ``--web.enable-lifecycle``); raises if Prometheus refuses them."""
    rules = config.parent / "rules.yml"
    rules.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))

    def point_at_rules(doc: dict[str, Any]) -> None:
        doc["rule_files"] = [str(rules)]

    _edit(config, url, point_at_rules)
    return rules


def add_scrape_job(config: Path, url: str, job: dict[str, Any]) -> None:
    """Add scrape ``job`` (a ``scrape_configs`` entry; one of the same ``job_name`` is replaced) to
    ``config`` and reload Prometheus at ``url``; raises if Prometheus refuses it. See
    :func:`remove_scrape_job`."""

    def add(doc: dict[str, Any]) -> None:
        jobs = [j for j in doc.get("scrape_configs") or [] if j.get("job_name") != job["job_name"]]
        doc["scrape_configs"] = [*jobs, job]

    _edit(config, url, add)


def remove_scrape_job(config: Path, url: str, job_name: str) -> None:
    """Remove the scrape job ``job_name`` from ``config`` (if there) and reload Prometheus: it stops
    scraping the job's targets and marks their series stale."""

    def remove(doc: dict[str, Any]) -> None:
        doc["scrape_configs"] = [j for j in doc.get("scrape_configs") or [] if j.get("job_name") != job_name]

    _edit(config, url, remove)


def _edit(config: Path, url: str, change: Callable[[dict[str, Any]], None]) -> None:
    """Change ``config`` and reload Prometheus, one edit at a time across processes (a lock file
    beside it: test workers load rules and add jobs at once). A change Prometheus refuses is undone
    (the next reload must not fail on it) and raised."""
    with (config.parent / f"{config.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        before = config.read_text()
        doc = yaml.safe_load(before)
        change(doc)
        config.write_text(yaml.safe_dump(doc, sort_keys=False))
        answer = httpx.post(f"{url}/-/reload", timeout=30)
        if answer.is_error:
            config.write_text(before)
            httpx.post(f"{url}/-/reload", timeout=30)
        answer.raise_for_status()


def command(config: Path, data_dir: Path, port: int) -> list[str]:
    """The Prometheus command line, listening on 127.0.0.1:``port``."""
    return [
        str(binary()),
        f"--config.file={config}",
        f"--storage.tsdb.path={data_dir}",
        "--storage.tsdb.retention.time=1d",
        f"--web.listen-address=127.0.0.1:{port}",
        "--web.enable-lifecycle",
    ]
