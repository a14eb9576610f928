"""How fast a bad canary is pulled: canary ready → rollback decision → traffic back on stable.

Measures the operator of any checkout (``--source``, default this one)::

    .venv/bin/python bench/rollback_latency.py [--source DIR] [--trials 3] [--max-trials 5]

1. starts a local cluster (``localkube``, scrape interval 5 s) in a temporary directory,
   installs ``DIR/crds``, and runs ``python -m slipway`` with ``PYTHONPATH=DIR/operator`` as a
   subprocess, with the cluster's MLflow and Prometheus (``SLIPWAY_MLFLOW_URL``,
   ``SLIPWAY_PROMETHEUS_URL``) and every interval at its default;
2. one namespace per configuration: analysis interval 5 s and 10 s × failureLimit 0 and 1. Each
   has an InferenceDeployment ``digits`` that follows the MLflow alias ``candidate`` of its own
   model, 2 stable replicas, one step ``{weight: 25, pause: 5m}`` (so only the analysis decides),
   and one metric ``errorRate`` max 0.05; version 1 (healthy) is promoted first;
3. a trial: a load driver at 20 requests/s on the Service's ready endpoints (``LoadDriver``), then
   a new version carrying the fault tag ``slipway.fault.errorRate=0.3`` becomes ``candidate``. The
   bench polls the API every 0.25 s and Prometheus every 0.5 s and records:
   - canary ready: the canary pod's Ready condition as first seen (and ``status.canary.readyReplicas``);
   - breach visible: the analysis' own PromQL (``status.analysis[].query`` once there, before that
     the same built-in canary error ratio) first above 0.05;
   - decision: ``status.lastRollback.time`` (whole seconds), and when phase ``RolledBack`` was seen;
   - traffic back on stable: first poll after the decision with no ready canary endpoint in the
     Service's EndpointSlices;
   - the load driver's 5xx responses during the trial, and after the decision;
   trials are interleaved across configurations (round after round, the order rotated);
4. prints per configuration p50/p90 of canary ready → decision and → traffic back on stable, next
   to the floor: scrape interval + the analysis' rate window + interval × (failureLimit + 1);
   writes ``result.json`` (every trial's timeline), ``table.md`` and the operator's log to
   ``bench/out/rollback-<time>-<label>/`` (git-ignored).

A benchmark, run by hand (``make bench-rollback``): never by ``make test`` or CI.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.harness import (
    GROUP,
    IMAGE,
    ROOT,
    VERSION,
    Operator,
    PollingThreads,
    create_namespace,
    describe,
    git,
    install_crds,
    local_cluster,
    log,
    log_findings,
    machine,
    operator_env,
    print_log_findings,
    source_of,
)
from localkube.audit import audited_kubeconfig
from localkube.kube import Kube, api_client
from localkube.state import ClusterInfo
from localkube.wait import wait_for
from slipway.mlflow import MlflowClient
from slipway_e2e.loadgen import LoadDriver, LoadStats

USER = "slipway-bench"
NAME = "digits"  # the InferenceDeployment and its Service, in every namespace
SERVE = ["python", "-m", "slipway.workloads.serve"]
THRESHOLD = 0.05
ERROR_RATE = "0.3"
RATE = 20.0  # requests per second
SCRAPE_SECONDS = 5.0  # localkube's ClusterConfig.scrape_interval
MIN_WINDOW_SECONDS = 20.0  # slipway.analysis.MIN_WINDOW_SECONDS: the rate window is max(interval, this)
KUBE_POLL = 0.25
PROM_POLL = 0.5
# The labels Prometheus derives from the serving pods' labels (slipway.analysis).
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
        """The analysis' rate() window: ``slipway.analysis.analysis_window(interval)``."""
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
        """The built-in errorRate PromQL of the canary of ``version`` (``slipway.analysis._error_ratio``)."""
        selector = (
            f'namespace="{self.namespace}", slipway_dev_deployment="{NAME}", slipway_dev_track="canary", '
            f'slipway_dev_model_version="{version}"'
        )
        window = f"{int(self.window_seconds)}s"
        failed = f'sum(rate(slipway_requests_total{{{selector}, code=~"5.."}}[{window}]))'
        total = f"sum(rate(slipway_requests_total{{{selector}}}[{window}]))"
        return f"({failed} or vector(0)) / {total}"


def configurations() -> list[Config]:
    """The four configurations. Every local cluster on the machine gives pods addresses from the same
    loopback range, so the servers listen on ports of their own (as in at_rest.py)."""
    ports = random.sample(range(20000, 30000), 4)
    pairs = [(interval, limit) for interval in ("5s", "10s") for limit in (0, 1)]
    return [Config(interval, limit, port) for (interval, limit), port in zip(pairs, ports, strict=True)]


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
    tags = {f"slipway.fault.{k}": v for k, v in faults.items()}
    version = mlflow.create_model_version(model, f"runs:/{run_id}/model", run_id, tags).version
    mlflow.set_alias(model, "candidate", version)
    return str(version)


def alias(mlflow: MlflowClient, model: str, name: str) -> str | None:
    found = mlflow.get_version_by_alias(model, name)
    return str(found.version) if found else None


# --------------------------------------------------------------------------- one trial


def fivexx(stats: LoadStats) -> int:
    return sum(n for code, n in stats.by_code.items() if code >= 500)


@dataclass
class Trial:
    """What one bad version went through, in epoch seconds (the bench's clock unless said otherwise)."""

    config: str
    round: int
    version: str
    published: float
    canary_pod_created: float | None = None
    canary_pod_ready: float | None = None
    canary_pod_ready_transition: float | None = None  # the pod's Ready lastTransitionTime (whole seconds)
    status_ready_replicas: float | None = None  # status.canary.readyReplicas >= 1 first seen
    canary_endpoint_ready: float | None = None
    first_data: float | None = None  # the canary error ratio first answered (not no data)
    breach_visible: float | None = None  # ... first above the threshold
    breach_query_source: str | None = None  # "status" (the analysis' own query) or "bench" (built here)
    decision: float | None = None  # status.lastRollback.time (whole seconds, the operator's clock)
    rolled_back_seen: float | None = None
    back_on_stable: float | None = None
    promoted_seen: float | None = None  # a mis-decision: the bad version promoted
    rollback: dict[str, Any] | None = None
    failed_analyses_at_decision: int | None = None
    analyses: list[dict[str, Any]] = field(default_factory=list)
    timeline: list[dict[str, Any]] = field(default_factory=list)
    prometheus: list[tuple[float, float | None]] = field(default_factory=list)
    load: dict[str, dict[str, Any]] = field(default_factory=dict)
    production_after: str | None = None
    stable_after: str | None = None
    status_analysis_after: list[dict[str, Any]] = field(default_factory=list)  # status.analysis once settled
    problems: list[str] = field(default_factory=list)  # mis-decisions
    notes: list[str] = field(default_factory=list)  # what else is worth telling
    ended: float | None = None

    def snapshot(self, name: str, stats: LoadStats) -> None:
        self.load[name] = {"time": time.time(), "responses": stats.responses, "5xx": fivexx(stats),
                           "transport_errors": sum(stats.transport_errors.values()), "no_endpoint": stats.no_endpoint,
                           "skipped": stats.skipped}  # fmt: skip

    @property
    def ready(self) -> float | None:
        """Canary ready: the pod's Ready condition as first seen, else status.canary.readyReplicas."""
        return self.canary_pod_ready or self.status_ready_replicas

    def derived(self) -> dict[str, Any]:
        def since(a: float | None, b: float | None) -> float | None:
            return round(b - a, 2) if a is not None and b is not None else None

        load = self.load
        out = {
            "ready_to_decision": since(self.ready, self.decision),
            "ready_to_rolled_back_seen": since(self.ready, self.rolled_back_seen),
            "ready_to_back_on_stable": since(self.ready, self.back_on_stable),
            "ready_to_first_data": since(self.ready, self.first_data),
            "ready_to_breach_visible": since(self.ready, self.breach_visible),
            "breach_visible_to_decision": since(self.breach_visible, self.decision),
            "published_to_canary_ready": since(self.published, self.ready),
            "pod_ready_to_status_ready": since(self.canary_pod_ready, self.status_ready_replicas),
            "pod_ready_to_endpoint_ready": since(self.canary_pod_ready, self.canary_endpoint_ready),
            "decision_to_back_on_stable": since(self.decision, self.back_on_stable),
        }
        if "start" in load and "end" in load:
            out["5xx"] = load["end"]["5xx"] - load["start"]["5xx"]
            out["responses"] = load["end"]["responses"] - load["start"]["responses"]
        if "rolled_back_seen" in load and "end" in load:  # the driver refreshes its endpoints every second
            out["5xx_after_decision"] = load["end"]["5xx"] - load["rolled_back_seen"]["5xx"]
            out["transport_errors_after_decision"] = (
                load["end"]["transport_errors"] - load["rolled_back_seen"]["transport_errors"]
            )
        results = [a["result"] for a in self.analyses]
        out["analyses"] = " ".join(r[0] for r in results)  # P(assed) I(nconclusive) F(ailed), in order
        return out


class Observer(PollingThreads):
    """Polls the deployment, the canary pods and the Service's EndpointSlices (every 0.25 s) and the
    canary's error ratio in Prometheus (every 0.5 s) for one trial, in two threads."""

    def __init__(self, kube: Kube, prometheus_url: str, cfg: Config, trial: Trial, load: LoadDriver) -> None:
        self.kube, self.cfg, self.trial, self.load = kube, cfg, trial, load
        super().__init__(prometheus_url, KUBE_POLL, PROM_POLL)
        self.query: str | None = None  # the analysis' errorRate PromQL, once status shows it
        self.canary_pods: set[str] = set()
        self.seen_analyses: set[str] = set()
        self.last_state: tuple[Any, ...] | None = None

    def poll_error(self, text: str) -> None:
        self.trial.problems.append(text)

    def poll_kube(self) -> None:
        t, ns, trial = time.time(), self.cfg.namespace, self.trial
        idep = self.kube.get(path(ns, "inferencedeployments", NAME))
        status = idep.get("status") or {}
        canary = status.get("canary") or {}
        ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
        state = (status.get("phase"), ready.get("reason"), status.get("failedAnalyses"), canary.get("modelVersion"),
                 canary.get("readyReplicas"))  # fmt: skip
        if state != self.last_state:
            self.last_state = state
            trial.timeline.append({"t": t, "phase": state[0], "reason": state[1], "failedAnalyses": state[2],
                                   "canaryVersion": state[3], "canaryReady": state[4]})  # fmt: skip
        if canary.get("modelVersion") == trial.version and (canary.get("readyReplicas") or 0) >= 1:
            trial.status_ready_replicas = trial.status_ready_replicas or t
        for result in status.get("analysis") or []:
            when = epoch(result.get("time"))
            key = f"{result.get('metric')}@{result.get('time')}"
            if when is None or when < math.floor(trial.published) or key in self.seen_analyses:
                continue  # the previous canary's results, until the new canary clears them
            self.seen_analyses.add(key)
            fields = ("metric", "result", "value", "message")
            trial.analyses.append({"seen": t, "time": when} | {k: result.get(k) for k in fields})
            if result.get("metric") == "errorRate" and result.get("query"):
                self.query = result["query"]
        rollback = status.get("lastRollback") or {}
        if rollback.get("modelVersion") == trial.version and trial.rolled_back_seen is None:
            trial.rolled_back_seen = t if status.get("phase") == "RolledBack" else None
            if trial.rolled_back_seen:
                trial.decision = epoch(rollback.get("time"))
                trial.rollback = rollback
                trial.failed_analyses_at_decision = status.get("failedAnalyses")
                trial.snapshot("rolled_back_seen", self.load.stats())
                if rollback.get("reason") == "AnalysisFailed":  # the deciding analysis, as lastRollback tells it
                    trial.analyses.append({"seen": t, "time": trial.decision, "metric": rollback.get("metric"),
                                           "result": "Failed", "value": rollback.get("value"),
                                           "message": "from status.lastRollback"})  # fmt: skip
        if status.get("phase") in ("Promoting", "Promoted") and (
            canary.get("modelVersion") == trial.version
            or (status.get("stable") or {}).get("modelVersion") == trial.version
        ):
            trial.promoted_seen = trial.promoted_seen or t

        pods = self.kube.get(path(ns, "pods"), labelSelector=f"{TRACK_LABEL}=canary")["items"]
        for pod in pods:
            self.canary_pods.add(pod["metadata"]["name"])
            if (pod["metadata"].get("labels") or {}).get(VERSION_LABEL) != trial.version:
                continue
            trial.canary_pod_created = trial.canary_pod_created or epoch(pod["metadata"].get("creationTimestamp"))
            cond = next((c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), {})
            if cond.get("status") == "True" and trial.canary_pod_ready is None:
                trial.canary_pod_ready = t
                trial.canary_pod_ready_transition = epoch(cond.get("lastTransitionTime"))
                trial.snapshot("canary_ready", self.load.stats())

        slices = self.kube.get(path(ns, "endpointslices"), labelSelector=f"kubernetes.io/service-name={NAME}")
        canary_ready = False
        for endpoint_slice in slices["items"]:
            for endpoint in endpoint_slice.get("endpoints") or []:
                target = (endpoint.get("targetRef") or {}).get("name", "")
                is_canary = target in self.canary_pods or target.startswith(f"{NAME}-canary-")
                if is_canary and (endpoint.get("conditions") or {}).get("ready") is not False:
                    canary_ready = True
        if canary_ready and trial.canary_pod_ready is not None:
            trial.canary_endpoint_ready = trial.canary_endpoint_ready or t
        if trial.rolled_back_seen is not None and not canary_ready and trial.back_on_stable is None:
            trial.back_on_stable = t
            trial.snapshot("back_on_stable", self.load.stats())

    def poll_prometheus(self) -> None:
        trial = self.trial
        if trial.canary_pod_created is None or trial.back_on_stable is not None:
            return
        query = self.query or self.cfg.error_ratio_query(trial.version)
        answer = self.prom.get("/api/v1/query", params={"query": query}).json()
        t = time.time()
        result = (answer.get("data") or {}).get("result") or []
        value = float(result[0]["value"][1]) if result else None
        if value is not None and math.isnan(value):
            value = None
        trial.prometheus.append((t, value))
        if value is not None:
            trial.first_data = trial.first_data or t
            if value > THRESHOLD and trial.breach_visible is None:
                trial.breach_visible = t
                trial.breach_query_source = "status" if self.query else "bench"


def run_trial(
    kube: Kube, info: ClusterInfo, api: Any, mlflow: MlflowClient, run_id: str, cfg: Config, round_: int,
    operator: Operator, timeout: float,
) -> Trial:  # fmt: skip
    ns = cfg.namespace
    with LoadDriver.for_service(api, ns, NAME, rate=RATE, max_duration=timeout + 120) as load:
        wait_for(lambda: load.stats().responses >= 10, 30, f"{ns}: the load driver's first responses")
        stats = load.stats()
        version = publish(mlflow, cfg.model, run_id, errorRate=ERROR_RATE)
        trial = Trial(cfg.name, round_, version, time.time())
        trial.snapshot("start", stats)
        assert info.prometheus_url
        with Observer(kube, info.prometheus_url, cfg, trial, load):
            deadline = time.monotonic() + timeout
            while trial.back_on_stable is None and trial.promoted_seen is None:
                if not operator.alive():
                    raise SystemExit(f"the operator exited: see {operator.log_path}")
                if time.monotonic() > deadline:
                    trial.problems.append(f"no rollback and traffic back on stable within {timeout:.0f} s")
                    break
                time.sleep(0.2)
            time.sleep(2)  # the driver refreshes its endpoints every second: let it see the canary gone
        trial.snapshot("end", load.stats())
    trial.ended = time.time()
    if trial.back_on_stable is None:  # not rolled back (or promoted): abort, so the next trial starts clean
        kube.patch(path(ns, "inferencedeployments", NAME), {"metadata": {"annotations": {"slipway.dev/abort": "true"}}},
                   kind="merge")  # fmt: skip
    wait_for(lambda: not kube.get(path(ns, "pods"), labelSelector=f"{TRACK_LABEL}=canary")["items"], 90,
             f"{ns}: the canary pods gone")  # fmt: skip
    trial.production_after = alias(mlflow, cfg.model, "production")
    rollback = trial.rollback or {}
    status = kube.get(path(ns, "inferencedeployments", NAME)).get("status") or {}
    trial.stable_after = (status.get("stable") or {}).get("modelVersion")
    trial.status_analysis_after = status.get("analysis") or []
    shown = [a for a in trial.status_analysis_after if a.get("metric") == "errorRate"]
    if trial.rollback and not any(a.get("time") == rollback.get("time") for a in shown):
        listed = ", ".join(f"{a.get('result')} {a.get('value')} at {a.get('time')}" for a in shown)
        trial.notes.append(f"status.analysis after the rollback is not the deciding analysis (it shows {listed})")
    first = next((v for _, v in trial.prometheus if v is not None), None)
    if first is not None and first >= 0.99:
        trial.notes.append(f"the canary's first error ratio in Prometheus was {first:.2f} (a 5xx series with two "
                           "samples before the 2xx one)")  # fmt: skip
    elif first is not None and first <= THRESHOLD:
        trial.notes.append(f"the canary's first error ratio in Prometheus was {first:.2f}, under the threshold")
    if trial.promoted_seen is not None:
        trial.problems.append("the bad version was promoted")
    if trial.rollback and (rollback.get("reason"), rollback.get("metric")) != ("AnalysisFailed", "errorRate"):
        trial.problems.append(f"rolled back for {rollback.get('reason')}/{rollback.get('metric')}, not errorRate")
    if trial.failed_analyses_at_decision not in (None, cfg.failure_limit + 1):
        trial.problems.append(f"failedAnalyses {trial.failed_analyses_at_decision} at the decision, "
                              f"expected failureLimit + 1 = {cfg.failure_limit + 1}")  # fmt: skip
    if trial.production_after != "1" or trial.stable_after != "1":
        trial.problems.append(f"after the trial production is {trial.production_after}, stable {trial.stable_after}")
    return trial


# --------------------------------------------------------------------------- statistics and the table


def percentile(values: list[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return None
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    low, high = math.floor(k), math.ceil(k)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def summarize(configs: list[Config], trials: list[dict[str, Any]]) -> dict[str, Any]:
    rows = {}
    for cfg in configs:
        mine = [t for t in trials if t["config"] == cfg.name]
        row: dict[str, Any] = {"label": cfg.label, "trials": len(mine), "floor": cfg.floor_seconds,
                               "two_sample": cfg.two_sample_seconds, "window": cfg.window_seconds}  # fmt: skip
        for key in ("ready_to_decision", "ready_to_rolled_back_seen", "ready_to_back_on_stable",
                    "ready_to_breach_visible", "breach_visible_to_decision", "published_to_canary_ready",
                    "5xx", "5xx_after_decision"):  # fmt: skip
            values = [t["derived"][key] for t in mine if t["derived"].get(key) is not None]
            row[key] = {"n": len(values), "p50": percentile(values, 0.5), "p90": percentile(values, 0.9),
                        "min": min(values, default=None), "max": max(values, default=None)}  # fmt: skip
        row["problems"] = sum(1 for t in mine if t["problems"])
        row["notes"] = sorted({note.split(" (")[0] for t in mine for note in t["notes"]})
        rows[cfg.name] = row
    return rows


def render_table(rows: dict[str, Any]) -> str:
    lines = [
        "| configuration | trials | ready → decision p50 / p90 (s) | ready → traffic on stable p50 / p90 (s) "
        "| floor (s) | two-sample bound (s) | ready → breach visible p50 (s) | ready → RolledBack seen p50 (s) "
        "| 5xx per trial p50 (after decision) | mis-decisions |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows.values():
        d, s, b = row["ready_to_decision"], row["ready_to_back_on_stable"], row["ready_to_breach_visible"]
        seen, errors, after = row["ready_to_rolled_back_seen"], row["5xx"], row["5xx_after_decision"]
        lines.append(
            f"| {row['label']} | {row['trials']} | {fmt(d['p50'])} / {fmt(d['p90'])} | {fmt(s['p50'])} / "
            f"{fmt(s['p90'])} | {row['floor']:.0f} | {row['two_sample']:.0f} | {fmt(b['p50'])} | {fmt(seen['p50'])} | "
            f"{fmt(errors['p50'])} ({fmt(after['p50'])}) | {row['problems']} |"
        )
    return "\n".join(lines)


def render_trials(trials: list[dict[str, Any]]) -> str:
    lines = [
        "| configuration | round | version | published → ready | ready → breach visible | ready → decision "
        "| ready → RolledBack seen | ready → on stable | analyses | 5xx / responses | problems; notes |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---|",
    ]
    for t in trials:
        d = t["derived"]
        lines.append(
            f"| {t['config']} | {t['round']} | {t['version']} | {fmt(d['published_to_canary_ready'])} | "
            f"{fmt(d['ready_to_breach_visible'])} | {fmt(d['ready_to_decision'])} | "
            f"{fmt(d['ready_to_rolled_back_seen'])} | {fmt(d['ready_to_back_on_stable'])} | `{d['analyses']}` | "
            f"{d.get('5xx', '-')} / {d.get('responses', '-')} | {'; '.join(t['problems'] + t['notes']) or '-'} |"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------- the run


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


def run_rounds(
    args: argparse.Namespace, kube: Kube, info: ClusterInfo, api: Any, mlflow: MlflowClient, run_id: str,
    configs: list[Config], operator: Operator, budget_end: float, result: dict[str, Any],
) -> None:  # fmt: skip
    """Round after round, one trial per configuration in a rotated order: at least ``--trials`` rounds
    (a trial that would end past the budget is cut and listed), more while a whole round fits."""
    durations: list[float] = []
    result["cut"] = cut = []
    for round_ in range(1, args.max_trials + 1):
        shift = (round_ - 1) % len(configs)
        order = configs[shift:] + configs[:shift]
        estimate = max(durations, default=120.0)
        if round_ > args.trials and time.monotonic() + estimate * len(order) > budget_end:
            log(f"round {round_}: no time left for a whole round; stopping")
            break
        for cfg in order:
            if time.monotonic() + estimate > budget_end:
                cut.append(f"round {round_} {cfg.name}")
                continue
            t0 = time.monotonic()
            trial = run_trial(kube, info, api, mlflow, run_id, cfg, round_, operator, args.trial_timeout)
            durations.append(time.monotonic() - t0)
            record = trial.__dict__ | {"derived": trial.derived()}
            result["trials"].append(record)
            d = record["derived"]
            log(
                f"round {round_} {cfg.name} v{trial.version}: ready→decision {fmt(d['ready_to_decision'])}s, "
                f"ready→stable {fmt(d['ready_to_back_on_stable'])}s, breach visible "
                f"{fmt(d['ready_to_breach_visible'])}s, analyses {d['analyses']}, 5xx {d.get('5xx')}; "
                f"trial {durations[-1]:.0f}s" + (f"; PROBLEMS: {trial.problems}" if trial.problems else "")
            )


def run(args: argparse.Namespace) -> dict[str, Any]:
    source = source_of(args.source)
    commit = git(source, "rev-parse", "HEAD")
    label = args.label or (commit[:7] if commit else source.name)
    out = (args.out or ROOT / "bench" / "out" / f"rollback-{datetime.now():%Y%m%d-%H%M%S}-{label}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    extra_env = dict(item.split("=", 1) for item in args.env)
    configs = [c for c in configurations() if not args.only or c.name in args.only]
    started = time.monotonic()
    budget_end = started + args.budget_minutes * 60
    log(f"source {source} ({label}), output {out}")
    dirty = git(source, "status", "--porcelain", "--", "operator", "crds").splitlines()
    result: dict[str, Any] = {
        "benchmark": "rollback_latency",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "source": str(source),
        "commit": commit,
        "commit_subject": git(source, "log", "-1", "--format=%s"),
        "source_dirty": dirty,
        "source_diff_sha1": hashlib.sha1(git(source, "diff", "HEAD", "--", "operator", "crds").encode()).hexdigest()
        if dirty
        else None,
        "bench_commit": git(ROOT, "rev-parse", "HEAD"),
        "machine": machine(),
        "configurations": [
            {
                "name": c.name,
                "interval": c.interval,
                "failureLimit": c.failure_limit,
                "port": c.port,
                "window_seconds": c.window_seconds,
                "floor_seconds": c.floor_seconds,
            }
            for c in configs
        ],  # fmt: skip
        "settings": {
            "rate": RATE,
            "errorRate": ERROR_RATE,
            "threshold": THRESHOLD,
            "scrape_seconds": SCRAPE_SECONDS,
            "trials": args.trials,
            "max_trials": args.max_trials,
            "budget_minutes": args.budget_minutes,
        },  # fmt: skip
        "trials": [],
    }
    operator: Operator | None = None
    try:
        with local_cluster(args.keep_cluster_dir, prefix="slipway-rollback-") as info:
            try:
                assert info.mlflow_url and info.prometheus_url
                admin = Kube(info.kubeconfig)
                install_crds(admin, source / "crds")
                for cfg in configs:
                    create_namespace(admin, cfg.namespace)
                env = operator_env(source, audited_kubeconfig(info, USER), info.mlflow_url, info.prometheus_url,
                                   extra_env)  # fmt: skip
                operator = Operator(source, env, [c.namespace for c in configs], out / "operator.log")
                result["slipway_imported_from"] = operator.check_import()
                result["operator_env"] = {k: v for k, v in env.items() if k.startswith("SLIPWAY_") or k == "PYTHONPATH"}
                operator.start()
                log(f"operator started (pid {operator.pid}), importing {result['slipway_imported_from']}")

                t0 = time.monotonic()
                run_id = train(info.mlflow_url)
                log(f"trained run {run_id} in {time.monotonic() - t0:.1f}s")
                api = api_client(info.kubeconfig)
                with MlflowClient(info.mlflow_url) as mlflow:
                    for cfg in configs:
                        mlflow.get_or_create_registered_model(cfg.model)
                        publish(mlflow, cfg.model, run_id)
                        admin.create(path(cfg.namespace, "inferencedeployments"), cfg.deployment())
                    t0 = time.monotonic()
                    settle_deployments(admin, mlflow, configs, operator, args.ready_timeout)
                    result["v1_serving_seconds"] = round(time.monotonic() - t0, 1)
                    log(f"version 1 serving everywhere after {result['v1_serving_seconds']} s")

                    run_rounds(args, admin, info, api, mlflow, run_id, configs, operator, budget_end, result)
            finally:
                if operator is not None:
                    operator.stop()
    finally:
        result["wall_seconds"] = round(time.monotonic() - started, 1)
        if operator is not None:
            result["operator_log"] = log_findings(operator.log_path)
        if result["trials"]:
            result["summary"] = summarize(configs, result["trials"])
        (out / "result.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    table = render_table(result["summary"])
    trials = render_trials(result["trials"])
    header = (f"{label} ({result['commit_subject']})" if commit else label) + f", {result['date']}"
    if dirty:
        header += f", plus uncommitted changes in {len(dirty)} files of operator/ and crds/"
    (out / "table.md").write_text(f"{header}\n\n{table}\n\nTrials:\n\n{trials}\n")
    print(f"\n{header}\n\n{table}\n\n{trials}\n")
    if result.get("cut"):
        print(f"cut for time: {', '.join(result['cut'])}")
    print_log_findings(result.get("operator_log", {}), out / "operator.log")
    print(f"written: {out / 'result.json'}, {out / 'table.md'}; {result['wall_seconds']:.0f} s in all")
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--source", type=Path, default=ROOT, help="a checkout whose operator/ holds the slipway package to measure"
    )
    p.add_argument("--trials", type=int, default=3, help="trials per configuration (cut only if over the budget)")
    p.add_argument("--max-trials", type=int, default=5, help="more rounds, while a whole round fits the budget")
    p.add_argument("--budget-minutes", type=float, default=20.0, help="no trial starts that would end past this")
    p.add_argument("--trial-timeout", type=float, default=300.0, help="seconds from publishing to traffic on stable")
    p.add_argument("--ready-timeout", type=float, default=600.0, help="seconds for version 1 to serve everywhere")
    p.add_argument("--label", help="name of this run in the output (default: the source's short commit)")
    p.add_argument("--out", type=Path, help="output directory (default: bench/out/rollback-<time>-<label>)")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="extra environment for the operator")
    p.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NAME",
        help="run only this configuration (rb-i5s-f0, rb-i5s-f1, rb-i10s-f0, rb-i10s-f1; repeatable)",
    )
    p.add_argument("--keep-cluster-dir", action="store_true", help="keep the stopped cluster's directory (logs)")
    args = p.parse_args(argv)
    if any("=" not in item for item in args.env):
        p.error("--env takes KEY=VALUE")
    if not 1 <= args.trials <= args.max_trials:
        p.error("give 1 <= --trials <= --max-trials")
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
