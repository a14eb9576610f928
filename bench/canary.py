"""The model, its versions and the canary of scenarios A and B: the reference model trained once,
versions published with fault tags, the canary's error-ratio query, and deployments settled on
version 1. (From ``bench/rollback_latency.py`` and ``bench/at_rest.py``, the earlier harnesses,
now the scenarios'.)
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bench.harness import (
    GROUP,
    IMAGE,
    VERSION,
    Operator,
    describe,
)
from localkube.kube import Kube
from localkube.wait import wait_for
from slipway.mlflow import MlflowClient
from slipway_e2e.loadgen import LoadStats

MODEL = "digits"
NAME = "digits"  # the InferenceDeployment and its Service, in every namespace
SERVE = ["python", "-m", "slipway.workloads.serve"]
THRESHOLD = 0.05
ERROR_RATE = "0.3"
RATE = 20.0  # requests per second
SCRAPE_SECONDS = 5.0  # localkube's ClusterConfig.scrape_interval
MIN_WINDOW_SECONDS = 20.0  # slipway.inference.analysis.MIN_WINDOW_SECONDS: the rate window is max(interval, this)
# The labels Prometheus derives from the serving pods' labels (slipway.inference.analysis).
TRACK_LABEL, VERSION_LABEL = "slipway.dev/track", "slipway.dev/model-version"


def parse_seconds(text: str) -> float:
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    for unit in ("ms", "s", "m", "h"):
        if text.endswith(unit) and text[: -len(unit)].replace(".", "", 1).isdigit():
            return float(text[: -len(unit)]) * units[unit]
    raise ValueError(f"not a duration: {text!r}")


def epoch(stamp: str | None) -> float | None:
    """A Kubernetes/Slipway timestamp (``2026-12-01T04:15:00Z``, whole seconds) as epoch seconds."""
    if not stamp:
        return None
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


# --------------------------------------------------------------------------- configurations


@dataclass(frozen=True)
class Config:
    interval: str
    failure_limit: int
    port: int

    @property
    def name(self) -> str:
        return f"rb-i{self.interval}-f{self.failure_limit}"

    @property
    def namespace(self) -> str:
        return self.name

    @property
    def model(self) -> str:
        return f"bench-{self.name}"

    @property
    def label(self) -> str:
        return f"interval {self.interval}, failureLimit {self.failure_limit}"

    @property
    def window_seconds(self) -> float:
        """The analysis' rate() window: ``slipway.inference.analysis.analysis_window(interval)``."""
        return max(parse_seconds(self.interval), MIN_WINDOW_SECONDS)

    @property
    def two_sample_seconds(self) -> float:
        """A lower bound with rate() over the first two samples: one scrape interval between the canary's
        first two samples once it takes traffic, then failureLimit more analyses an interval apart."""
        return SCRAPE_SECONDS + parse_seconds(self.interval) * self.failure_limit

    @property
    def floor_seconds(self) -> float:
        return SCRAPE_SECONDS + self.window_seconds + parse_seconds(self.interval) * (self.failure_limit + 1)

    def deployment(self) -> dict[str, Any]:
        return {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "InferenceDeployment",
            "metadata": {"name": NAME},
            "spec": {
                "model": {"name": self.model, "alias": "candidate"},
                "image": IMAGE,
                "command": SERVE,
                "port": self.port,
                "autoscaling": {"minReplicas": 2, "maxReplicas": 2},
                "rollout": {
                    "steps": [{"weight": 25, "pause": "5m"}],
                    "maxSurgeReplicas": 1,
                    "analysis": {
                        "interval": self.interval,
                        "failureLimit": self.failure_limit,
                        "metrics": [{"name": "errorRate", "max": THRESHOLD}],
                    },
                },
            },
        }

    def error_ratio_query(self, version: str) -> str:
        """The built-in errorRate PromQL of the canary of ``version`` (``slipway.inference.analysis._error_ratio``)."""
        selector = (
            f'namespace="{self.namespace}", slipway_dev_deployment="{NAME}", slipway_dev_track="canary", '
            f'slipway_dev_model_version="{version}"'
        )
        window = f"{int(self.window_seconds)}s"
        failed = f'sum(rate(slipway_requests_total{{{selector}, code=~"5.."}}[{window}]))'
        total = f"sum(rate(slipway_requests_total{{{selector}}}[{window}]))"
        return f"({failed} or vector(0)) / {total}"


def path(namespace: str, plural: str, name: str | None = None) -> str:
    base = f"/apis/{GROUP}/{VERSION}" if plural == "inferencedeployments" else "/api/v1"
    if plural == "endpointslices":
        base = "/apis/discovery.k8s.io/v1"
    collection = f"{base}/namespaces/{namespace}/{plural}"
    return f"{collection}/{name}" if name else collection


# --------------------------------------------------------------------------- MLflow


def train(mlflow_url: str) -> str:
    """Train the reference model once (a local process, as the tests do); the run every version comes from."""
    with MlflowClient(mlflow_url) as mlflow:
        run_id = mlflow.create_run(mlflow.get_or_create_experiment("rollback-bench"), "train").run_id
    env = {**os.environ, "MLFLOW_TRACKING_URI": mlflow_url, "MLFLOW_RUN_ID": run_id}
    subprocess.run([sys.executable, "-m", "slipway.workloads.train", "--steps", "4"], env=env, check=True,
                   capture_output=True, timeout=300)  # fmt: skip
    return run_id


def publish(mlflow: MlflowClient, model: str, run_id: str, **faults: str) -> str:
    """A new version (its fault tags travel with it, as in the integration tests); ``candidate`` moves to it."""
    tags = {f"slipway.dev/fault-{k}": v for k, v in faults.items()}
    version = mlflow.create_model_version(model, f"runs:/{run_id}/model", run_id, tags).version
    mlflow.set_alias(model, "candidate", version)
    return str(version)


def alias(mlflow: MlflowClient, model: str, name: str) -> str | None:
    found = mlflow.get_version_by_alias(model, name)
    return str(found.version) if found else None


def fivexx(stats: LoadStats) -> int:
    return sum(n for code, n in stats.by_code.items() if code >= 500)


def percentile(values: list[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return None
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    low, high = math.floor(k), math.ceil(k)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


def settle_deployments(
    kube: Kube, mlflow: MlflowClient, configs: list[Config], operator: Operator, timeout: float
) -> None:
    """Every deployment serving version 1 on 2 ready stable pods, production → 1."""

    def done() -> bool:
        if not operator.alive():
            raise SystemExit(f"the operator exited: see {operator.log_path}")
        for cfg in configs:
            status = (kube.get(path(cfg.namespace, "inferencedeployments", NAME)).get("status")) or {}
            stable = status.get("stable") or {}
            if status.get("phase") != "Promoted" or stable.get("modelVersion") != "1":
                return False
            if (stable.get("readyReplicas") or 0) < 2 or alias(mlflow, cfg.model, "production") != "1":
                return False
        return True

    try:
        wait_for(done, timeout, "every deployment serving version 1", interval=1)
    except TimeoutError:
        states = "; ".join(
            f"{c.namespace}: {describe(kube.get_or_none(path(c.namespace, 'inferencedeployments', NAME)))}"
            for c in configs
        )
        raise TimeoutError(f"not every deployment serving version 1 within {timeout:.0f} s: {states}") from None


def training_run() -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainingRun",
        "metadata": {"name": "digits"},
        "spec": {
            "model": {"name": MODEL},
            "image": IMAGE,
            "command": ["python", "-m", "slipway.workloads.train"],
            "args": ["--steps", "4"],
            "artifact": {"quantization": {"method": "none"},
                         "validation": {"gates": [{"metric": "accuracy", "min": 0.5}]}, "aliases": ["candidate"]},
        },
    }  # fmt: skip
