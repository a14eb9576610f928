"""Scenario A, rollback latency with real pods: Slipway (Replicas mode) beside Argo Rollouts (basic
canary), the same bad canary, the same gate, on one local cluster.

``python -m bench rollback [--out DIR] [--trials 10]`` writes ``DIR/rollback.json``:

1. A local cluster (``localkube``: real API server, scheduler, controllers, node agent running pods
   as local processes, MLflow, Prometheus scraping every 5 s); Slipway's CRDs, Argo Rollouts' CRDs
   (server-side apply). The reference model is trained once (a local process); each system gets a
   registered model of its own, version 1 healthy.
2. Slipway: ``python -m slipway --standalone -n ra-slipway`` (user ``slipway-bench``, audited), an
   InferenceDeployment ``digits`` following the alias ``candidate``, 2 stable replicas (HPA min =
   max = 2), ``maxSurgeReplicas: 1``, one step ``{weight: 25, pause: 5m}`` (one canary pod beside
   two: 33% of the ready endpoints), analysis ``errorRate`` max 0.05 every ``--rollback-interval``
   with ``--rollback-failure-limit``.
   Argo: ``rollouts-controller`` (user ``argo-rollouts``, audited, leader election off), a Rollout
   ``digits`` of the pod template Slipway renders for the same spec (:func:`bench.argo.slipway_pod_template`),
   ``--argo-replicas`` (2), ``maxSurge: 1, maxUnavailable: 0``, steps ``setWeight: 33`` then
   ``pause: 5m``, canary/stable pod metadata ``slipway.dev/track: canary|stable``, and a background
   analysis from step 1 (once the canary is available) from an AnalysisTemplate with the
   Prometheus provider: the same PromQL (Slipway's built-in canary 5xx ratio over the same rate
   window), the same interval and failureLimit, failed above 0.05.
3. Trials, interleaved (slipway, argo, slipway, ...), ``--trials`` per system. Both controllers run
   throughout, but one system at a time is active: the other's objects are settled and idle (no
   new version, no load), and each trial records both controllers' CPU seconds to show it. A
   trial: a load driver at 20 requests/s over the Service's ready endpoints, then a bad version
   (MLflow tag ``slipway.dev/fault-errorRate=0.3``, so stable and canary pods get the same env) is
   published: Slipway's ``candidate`` alias moves to it; Argo's Rollout template is patched to its
   ``models:/name/version``. The bench polls the API every 0.25 s and Prometheus every 0.5 s:
   canary ready (pod Ready condition, first seen), breach visible (the analysis query > 0.05 in
   Prometheus), decision (Slipway: phase RolledBack with ``lastRollback`` of the version; Argo:
   ``status.abort`` or the AnalysisRun ``Failed``, whichever first; both first seen, the
   controllers' own timestamps kept beside), traffic back on stable (no ready canary endpoint in
   the Service's EndpointSlices), and the load driver's 5xx. Then the system is reset (Slipway:
   nothing, the canary is gone; Argo: the template back to version 1, Healthy again).
"""

from __future__ import annotations

import argparse
import math
import random
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import argo, rundir
from bench.canary import (
    ERROR_RATE,
    RATE,
    SCRAPE_SECONDS,
    THRESHOLD,
    TRACK_LABEL,
    VERSION_LABEL,
    Config,
    alias,
    epoch,
    fivexx,
    parse_seconds,
    percentile,
    publish,
    settle_deployments,
    train,
)
from bench.canary import path as slipway_path
from bench.harness import (
    IMAGE,
    ROOT,
    Operator,
    PollingThreads,
    create_namespace,
    install_crds,
    local_cluster,
    log,
    log_findings,
    operator_env,
)
from localkube.audit import audited_kubeconfig
from localkube.kube import Kube, api_client
from localkube.state import ClusterInfo
from localkube.wait import wait_for
from slipway.mlflow import MlflowClient
from slipway_e2e.loadgen import LoadDriver, LoadStats

SYSTEMS = ("slipway", "argo")
NAME = "digits"  # the InferenceDeployment / Rollout and its Service
SLIPWAY_NS, ARGO_NS = "ra-slipway", "ra-argo"
SLIPWAY_USER = "slipway-bench"
TEMPLATE = "error-rate"
HASH_LABEL = "rollouts-pod-template-hash"
KUBE_POLL, PROM_POLL = 0.25, 0.5
ARGO_WEIGHT = 33


@dataclass(frozen=True)
class Setup(Config):
    """One system's namespace, model and server port, with the canary's Config queries (bench/canary.py)."""

    system: str = "slipway"

    @property
    def name(self) -> str:
        return SLIPWAY_NS if self.system == "slipway" else ARGO_NS

    @property
    def model(self) -> str:
        return f"bench-{self.system}"

    def argo_query(self) -> str:
        """The AnalysisTemplate's query: Slipway's built-in canary error ratio, version from args."""
        return self.error_ratio_query("{{args.version}}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("scenario A: rollback latency, Slipway vs Argo Rollouts")
    g.add_argument("--trials", type=int, default=10, help="trials per system, interleaved (default 10)")
    g.add_argument("--rollback-interval", default="10s", help="analysis interval of both systems (default 10s)")
    g.add_argument("--rollback-failure-limit", type=int, default=1, help="failureLimit of both systems (default 1)")
    g.add_argument("--rollback-systems", default="slipway,argo", help="which systems, in round order")
    g.add_argument(
        "--argo-replicas", type=int, default=2, help="Rollout spec.replicas (default 2: 2 stable + 1 canary)"
    )
    g.add_argument("--rollback-trial-timeout", type=float, default=300.0, help="seconds from publishing to stable")
    g.add_argument("--rollback-ready-timeout", type=float, default=600.0, help="seconds for version 1 to serve")
    g.add_argument("--rollback-keep-cluster-dir", action="store_true", help="keep the stopped cluster's directory")


# --------------------------------------------------------------------------- one trial


@dataclass
class Trial:
    system: str
    round: int
    version: str
    published: float
    query: str = ""
    canary_created: float | None = None
    canary_ready: float | None = None
    canary_ready_transition: float | None = None  # the pod's Ready lastTransitionTime (whole seconds)
    canary_endpoint_ready: float | None = None
    first_data: float | None = None
    breach_visible: float | None = None
    decision: float | None = None  # first seen by the bench
    decision_signal: str | None = None  # what was seen first
    decision_stamp: float | None = None  # the controller's own timestamp of it (whole seconds)
    decision_detail: dict[str, Any] = field(default_factory=dict)
    stable_only: float | None = None
    promoted_seen: float | None = None
    canary_pods: dict[str, str] = field(default_factory=dict)  # name -> IP
    canary_hash: str | None = None  # Argo: the canary ReplicaSet's pod-template-hash
    endpoints_at_canary_ready: dict[str, int] = field(default_factory=dict)
    analyses: list[dict[str, Any]] = field(default_factory=list)
    timeline: list[dict[str, Any]] = field(default_factory=list)
    prometheus: list[tuple[float, float | None]] = field(default_factory=list)
    load: dict[str, dict[str, Any]] = field(default_factory=dict)
    controller_cpu_seconds: dict[str, float] = field(default_factory=dict)
    after: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    ended: float | None = None

    def snapshot(self, name: str, stats: LoadStats) -> None:
        self.load[name] = {"time": time.time(), "responses": stats.responses, "5xx": fivexx(stats),
                           "transport_errors": sum(stats.transport_errors.values()), "no_endpoint": stats.no_endpoint,
                           "by_endpoint": dict(stats.by_endpoint)}  # fmt: skip

    def record(self) -> dict[str, Any]:
        load = self.load
        out = dict(self.__dict__)
        start, end = load.get("start"), load.get("end")
        out["fivexx"] = end["5xx"] - start["5xx"] if start and end else None
        out["requests"] = end["responses"] - start["responses"] if start and end else None
        decided = load.get("decision")
        out["fivexx_after_decision"] = end["5xx"] - decided["5xx"] if decided and end else None
        if start and end:  # the canary's share of the responses while it took traffic
            ips = set(self.canary_pods.values())
            served = {ip: end["by_endpoint"].get(ip, 0) - start["by_endpoint"].get(ip, 0) for ip in end["by_endpoint"]}
            canary = sum(n for ip, n in served.items() if ip in ips)
            out["canary_responses"] = canary
            after_ready = load.get("canary_ready")
            if after_ready and decided:
                window = {ip: decided["by_endpoint"].get(ip, 0) - after_ready["by_endpoint"].get(ip, 0)
                          for ip in decided["by_endpoint"]}  # fmt: skip
                total = sum(window.values())
                out["canary_share_ready_to_decision"] = (
                    round(sum(n for ip, n in window.items() if ip in ips) / total, 3) if total else None
                )

        def since(a: float | None, b: float | None) -> float | None:
            return round(b - a, 2) if a is not None and b is not None else None

        out["derived"] = {
            "ready_to_breach_visible": since(self.canary_ready, self.breach_visible),
            "ready_to_decision": since(self.canary_ready, self.decision),
            "ready_to_decision_stamp": since(self.canary_ready, self.decision_stamp),
            "ready_to_stable_only": since(self.canary_ready, self.stable_only),
            "breach_visible_to_decision": since(self.breach_visible, self.decision),
            "decision_to_stable_only": since(self.decision, self.stable_only),
            "published_to_canary_ready": since(self.published, self.canary_ready),
            "ready_to_first_data": since(self.canary_ready, self.first_data),
            "analyses": " ".join(str(a.get("result") or a.get("phase") or "?")[0] for a in self.analyses),
        }
        return out


class Observer(PollingThreads):
    """Polls the system's object, the canary pods and the Service's EndpointSlices every 0.25 s, and
    the canary's error ratio in Prometheus every 0.5 s, for one trial, in two threads."""

    def __init__(self, kube: Kube, prometheus_url: str, setup: Setup, trial: Trial, load: LoadDriver) -> None:
        self.kube, self.setup, self.trial, self.load = kube, setup, trial, load
        super().__init__(prometheus_url, KUBE_POLL, PROM_POLL)
        self.last_state: tuple[Any, ...] | None = None
        self.last_endpoints: tuple[int, int] | None = None
        self.lock = threading.Lock()

    def poll_error(self, text: str) -> None:
        self.trial.notes.append(text)

    # -- the system's own object: subclasses

    def poll_object(self, t: float) -> None:
        raise NotImplementedError

    def is_canary(self, pod_name: str) -> bool:
        return pod_name in self.trial.canary_pods

    def decided(self, t: float, signal: str) -> None:
        trial = self.trial
        if trial.decision is None:
            trial.decision, trial.decision_signal = t, signal
            trial.snapshot("decision", self.load.stats())

    # -- pods and endpoints: the same for both

    def poll_kube(self) -> None:
        t, trial = time.time(), self.trial
        self.poll_object(t)
        ns = self.setup.namespace
        pods = self.kube.get(slipway_path(ns, "pods"), labelSelector=f"{TRACK_LABEL}=canary")["items"]
        for pod in pods:
            labels = pod["metadata"].get("labels") or {}
            if labels.get(VERSION_LABEL) != trial.version:
                continue
            trial.canary_pods[pod["metadata"]["name"]] = (pod.get("status") or {}).get("podIP") or ""
            trial.canary_hash = trial.canary_hash or labels.get(HASH_LABEL)
            trial.canary_created = trial.canary_created or epoch(pod["metadata"].get("creationTimestamp"))
            cond = next((c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), {})
            if cond.get("status") == "True" and trial.canary_ready is None:
                trial.canary_ready = t
                trial.canary_ready_transition = epoch(cond.get("lastTransitionTime"))
                trial.snapshot("canary_ready", self.load.stats())
        slices = self.kube.get(slipway_path(ns, "endpointslices"), labelSelector=f"kubernetes.io/service-name={NAME}")
        ready = {"stable": 0, "canary": 0}
        for endpoint_slice in slices["items"]:
            for endpoint in endpoint_slice.get("endpoints") or []:
                if (endpoint.get("conditions") or {}).get("ready") is False:
                    continue
                target = (endpoint.get("targetRef") or {}).get("name", "")
                ready["canary" if self.is_canary(target) else "stable"] += 1
        counts = (ready["stable"], ready["canary"])
        if counts != self.last_endpoints:
            self.last_endpoints = counts
            trial.timeline.append({"t": t, "ready_endpoints": dict(ready)})
        if ready["canary"] and trial.canary_ready is not None:
            trial.canary_endpoint_ready = trial.canary_endpoint_ready or t
            if not trial.endpoints_at_canary_ready:
                trial.endpoints_at_canary_ready = dict(ready)
        if trial.decision is not None and not ready["canary"] and trial.stable_only is None:
            trial.stable_only = t
            trial.snapshot("stable_only", self.load.stats())

    def query(self) -> str:
        return self.trial.query

    def poll_prometheus(self) -> None:
        trial = self.trial
        if trial.canary_created is None or trial.stable_only is not None:
            return
        answer = self.prom.get("/api/v1/query", params={"query": self.query()}).json()
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


class SlipwayObserver(Observer):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.seen_analyses: set[str] = set()
        self.status_query: str | None = None

    def is_canary(self, pod_name: str) -> bool:
        return pod_name in self.trial.canary_pods or pod_name.startswith(f"{NAME}-canary-")

    def query(self) -> str:
        return self.status_query or self.trial.query

    def poll_object(self, t: float) -> None:
        trial = self.trial
        status = self.kube.get(slipway_path(self.setup.namespace, "inferencedeployments", NAME)).get("status") or {}
        canary = status.get("canary") or {}
        ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
        state = (status.get("phase"), ready.get("reason"), status.get("failedAnalyses"), canary.get("modelVersion"),
                 canary.get("readyReplicas"), canary.get("weight"))  # fmt: skip
        if state != self.last_state:
            self.last_state = state
            trial.timeline.append(
                {
                    "t": t,
                    "phase": state[0],
                    "reason": state[1],
                    "failedAnalyses": state[2],
                    "canaryVersion": state[3],
                    "canaryReady": state[4],
                    "canaryWeight": state[5],
                }
            )
        for result in status.get("analysis") or []:
            when = epoch(result.get("time"))
            key = f"{result.get('metric')}@{result.get('time')}"
            if when is None or when < math.floor(trial.published) or key in self.seen_analyses:
                continue  # the previous canary's results, until the new canary clears them
            self.seen_analyses.add(key)
            fields = ("metric", "result", "value", "message", "query")
            trial.analyses.append({"seen": t, "time": when} | {k: result.get(k) for k in fields})
            if result.get("metric") == "errorRate" and result.get("query"):
                self.status_query = result["query"]
        rollback = status.get("lastRollback") or {}
        if rollback.get("modelVersion") == trial.version and status.get("phase") == "RolledBack":
            if trial.decision is None:
                trial.decision_stamp = epoch(rollback.get("time"))
                trial.decision_detail = {"lastRollback": rollback, "failedAnalyses": status.get("failedAnalyses")}
            self.decided(t, "phase RolledBack, status.lastRollback")
        if status.get("phase") in ("Promoting", "Promoted") and (
            canary.get("modelVersion") == trial.version
            or (status.get("stable") or {}).get("modelVersion") == trial.version
        ):
            trial.promoted_seen = trial.promoted_seen or t


class ArgoObserver(Observer):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.measurements: set[str] = set()
        self.analysis_run: str | None = None

    def is_canary(self, pod_name: str) -> bool:
        trial = self.trial
        return pod_name in trial.canary_pods or bool(
            trial.canary_hash and pod_name.startswith(f"{NAME}-{trial.canary_hash}-")
        )

    def query(self) -> str:
        return self.trial.query

    def poll_object(self, t: float) -> None:
        trial, ns = self.trial, self.setup.namespace
        ro = self.kube.get(argo.path(ns, "rollouts", NAME))
        status = ro.get("status") or {}
        background = (status.get("canary") or {}).get("currentBackgroundAnalysisRunStatus") or {}
        state = (status.get("phase"), bool(status.get("abort")), status.get("currentStepIndex"),
                 background.get("status"), status.get("stableRS"), status.get("currentPodHash"),
                 status.get("availableReplicas"), status.get("message"))  # fmt: skip
        if state != self.last_state:
            self.last_state = state
            keys = ("phase", "abort", "step", "analysisRun", "stableRS", "currentPodHash", "available", "message")
            trial.timeline.append({"t": t} | dict(zip(keys, state, strict=True)))
        current = status.get("currentPodHash")
        canary_current = trial.canary_hash is not None and current == trial.canary_hash
        if background.get("name") and canary_current:
            self.analysis_run = self.analysis_run or background["name"]
        ar_failed = False
        if self.analysis_run:
            run = self.kube.get_or_none(argo.path(ns, "analysisruns", self.analysis_run)) or {}
            run_status = run.get("status") or {}
            for metric in run_status.get("metricResults") or []:
                for m in metric.get("measurements") or []:
                    key = f"{metric.get('name')}@{m.get('startedAt')}"
                    if m.get("phase") == "Running" or key in self.measurements:
                        continue
                    self.measurements.add(key)
                    trial.analyses.append(
                        {
                            "seen": t,
                            "metric": metric.get("name"),
                            "result": m.get("phase"),
                            "value": m.get("value"),
                            "started": epoch(m.get("startedAt")),
                            "time": epoch(m.get("finishedAt")),
                            "message": m.get("message"),
                        }
                    )
            if run_status.get("phase") == "Failed":
                ar_failed = True
                if trial.decision is None:
                    failed = [m for r in run_status.get("metricResults") or [] for m in r.get("measurements") or []
                              if m.get("phase") == "Failed"]  # fmt: skip
                    trial.decision_stamp = epoch(failed[-1].get("finishedAt")) if failed else None
                    trial.decision_detail = {
                        "analysisRun": self.analysis_run,
                        "phase": "Failed",
                        "message": run_status.get("message"),
                        "metricResults": [
                            {
                                k: r.get(k)
                                for k in ("name", "phase", "count", "successful", "failed", "inconclusive", "error")
                            }
                            for r in run_status.get("metricResults") or []
                        ],
                    }
                self.decided(t, "AnalysisRun Failed")
        if status.get("abort") and canary_current:
            if trial.decision is None:
                trial.decision_stamp = epoch(status.get("abortedAt"))
                trial.decision_detail = {"abort": True, "abortedAt": status.get("abortedAt"),
                                         "message": status.get("message")}  # fmt: skip
            trial.decision_detail.setdefault("abortedAt", status.get("abortedAt"))
            self.decided(t, "Rollout status.abort" if not ar_failed else "AnalysisRun Failed")
        if trial.canary_hash and status.get("stableRS") == trial.canary_hash:
            trial.promoted_seen = trial.promoted_seen or t


# --------------------------------------------------------------------------- the systems


class Slipway:
    name = "slipway"

    def __init__(self, setup: Setup, kube: Kube, mlflow: MlflowClient, run_id: str, operator: Operator) -> None:
        self.setup, self.kube, self.mlflow, self.run_id, self.operator = setup, kube, mlflow, run_id, operator

    def pid(self) -> int | None:
        return self.operator.pid

    def check_alive(self) -> None:
        if not self.operator.alive():
            raise SystemExit(f"the Slipway operator exited: see {self.operator.log_path}")

    def trigger(self) -> str:
        return publish(self.mlflow, self.setup.model, self.run_id, errorRate=ERROR_RATE)

    def observer(self, *args: Any) -> Observer:
        return SlipwayObserver(*args)

    def query(self, version: str) -> str:
        return self.setup.error_ratio_query(version)

    def reset(self, trial: Trial) -> None:
        ns = self.setup.namespace
        if trial.stable_only is None:  # not rolled back: abort, so the next trial starts clean
            self.kube.patch(slipway_path(ns, "inferencedeployments", NAME),
                            {"metadata": {"annotations": {"slipway.dev/abort": "true"}}}, kind="merge")  # fmt: skip
        wait_for(lambda: not self.kube.get(slipway_path(ns, "pods"), labelSelector=f"{TRACK_LABEL}=canary")["items"],
                 120, f"{ns}: the canary pods gone")  # fmt: skip

    def check(self, trial: Trial) -> None:
        status = self.kube.get(slipway_path(self.setup.namespace, "inferencedeployments", NAME)).get("status") or {}
        rollback = (trial.decision_detail or {}).get("lastRollback") or {}
        trial.after = {"phase": status.get("phase"), "stable": (status.get("stable") or {}).get("modelVersion"),
                       "production": alias(self.mlflow, self.setup.model, "production"),
                       "failedAnalyses": (trial.decision_detail or {}).get("failedAnalyses")}  # fmt: skip
        if trial.decision is None:
            trial.problems.append("no rollback seen")
        elif (rollback.get("reason"), rollback.get("metric")) != ("AnalysisFailed", "errorRate"):
            trial.problems.append(f"rolled back for {rollback.get('reason')}/{rollback.get('metric')}, not errorRate")
        limit = self.setup.failure_limit + 1
        if trial.after["failedAnalyses"] not in (None, limit):
            trial.problems.append(f"failedAnalyses {trial.after['failedAnalyses']} at the decision, expected {limit}")
        if trial.after["stable"] != "1" or trial.after["production"] != "1":
            trial.problems.append(f"after the trial stable is {trial.after['stable']}, production "
                                  f"{trial.after['production']}")  # fmt: skip


class Argo:
    name = "argo"

    def __init__(self, setup: Setup, kube: Kube, mlflow: MlflowClient, run_id: str, controller: argo.Controller,
                 mlflow_url: str, replicas: int) -> None:  # fmt: skip
        self.setup, self.kube, self.mlflow, self.run_id = setup, kube, mlflow, run_id
        self.controller, self.mlflow_url, self.replicas = controller, mlflow_url, replicas
        self.stable_hash: str | None = None

    def pid(self) -> int | None:
        return self.controller.pid

    def check_alive(self) -> None:
        if not self.controller.alive():
            raise SystemExit(f"the Argo Rollouts controller exited: see {self.controller.log_path}")

    def template(self, version: str) -> dict[str, Any]:
        spec = self.setup.deployment()["spec"]
        return argo.slipway_pod_template(spec, NAME, self.setup.namespace, self.setup.model, version, self.mlflow_url)

    def analysis(self, version: str) -> dict[str, Any]:
        return {"templates": [{"templateName": TEMPLATE}], "startingStep": 1,
                "args": [{"name": "version", "value": version}]}  # fmt: skip

    def objects(self) -> list[tuple[str, dict[str, Any]]]:
        ns, s = self.setup.namespace, self.setup
        selector = {"slipway.dev/deployment": NAME}
        template = argo.analysis_template(TEMPLATE, s.argo_query(), s.interval, s.failure_limit, THRESHOLD,
                                          self.controller.info.prometheus_url or "")  # fmt: skip
        steps = [{"setWeight": ARGO_WEIGHT}, {"pause": {"duration": "5m"}}]
        rollout = argo.rollout(
            NAME,
            self.template("1"),
            selector,
            self.replicas,
            steps,
            self.analysis("1"),
            canary_labels={TRACK_LABEL: "canary"},
            stable_labels={TRACK_LABEL: "stable"},
        )
        return [
            (slipway_path(ns, "services"), argo.service(NAME, selector, s.port)),
            (argo.path(ns, "analysistemplates"), template),
            (argo.path(ns, "rollouts"), rollout),
        ]

    def settle(self, timeout: float) -> None:
        ns = self.setup.namespace

        def healthy() -> bool:
            self.check_alive()
            ro = self.kube.get(argo.path(ns, "rollouts", NAME))
            return argo.is_healthy(ro, self.replicas)

        wait_for(healthy, timeout, f"{ns}: the Rollout Healthy on version 1", interval=0.5)
        self.stable_hash = (self.kube.get(argo.path(ns, "rollouts", NAME)).get("status") or {}).get("stableRS")

    def patch_version(self, version: str) -> None:
        body = {
            "spec": {"template": self.template(version), "strategy": {"canary": {"analysis": self.analysis(version)}}}
        }
        self.kube.patch(argo.path(self.setup.namespace, "rollouts", NAME), body, kind="merge")

    def trigger(self) -> str:
        version = publish(self.mlflow, self.setup.model, self.run_id, errorRate=ERROR_RATE)
        self.patch_version(version)
        return version

    def observer(self, *args: Any) -> Observer:
        return ArgoObserver(*args)

    def query(self, version: str) -> str:
        return self.setup.argo_query().replace("{{args.version}}", version)

    def reset(self, trial: Trial) -> None:
        """Back to version 1 (the stable ReplicaSet's template: Argo takes it at once, no canary)."""
        ns = self.setup.namespace
        self.patch_version("1")
        self.settle(120)
        wait_for(lambda: not self.kube.get(slipway_path(ns, "pods"), labelSelector=f"{TRACK_LABEL}=canary")["items"],
                 120, f"{ns}: the canary pods gone")  # fmt: skip

    def check(self, trial: Trial) -> None:
        ro = self.kube.get(argo.path(self.setup.namespace, "rollouts", NAME))
        status = ro.get("status") or {}
        detail = trial.decision_detail or {}
        run = self.kube.get_or_none(argo.path(self.setup.namespace, "analysisruns", detail.get("analysisRun", "-")))
        results = ((run or {}).get("status") or {}).get("metricResults") or []
        failed = sum(r.get("failed") or 0 for r in results)
        trial.after = {"phase": status.get("phase"), "stableRS": status.get("stableRS"),
                       "stable_hash_before": self.stable_hash, "analysisRun": detail.get("analysisRun"),
                       "analysisRun_phase": ((run or {}).get("status") or {}).get("phase"), "failed": failed,
                       "abortedAt": detail.get("abortedAt")}  # fmt: skip
        if trial.decision is None:
            trial.problems.append("no abort seen")
        elif trial.after["analysisRun_phase"] != "Failed":
            trial.problems.append(f"the AnalysisRun is {trial.after['analysisRun_phase']}, not Failed")
        elif failed != self.setup.failure_limit + 1:
            trial.problems.append(
                f"{failed} failed measurements, expected failureLimit + 1 = {self.setup.failure_limit + 1}"
            )
        if status.get("stableRS") != self.stable_hash:
            trial.problems.append(f"the stable ReplicaSet changed: {self.stable_hash} -> {status.get('stableRS')}")


def run_trial(system: Slipway | Argo, kube: Kube, info: ClusterInfo, api: Any, round_: int, timeout: float,
              pids: dict[str, int | None]) -> Trial:  # fmt: skip
    ns = system.setup.namespace
    cpu_before = {name: argo.cpu_seconds(pid) for name, pid in pids.items() if pid}
    with LoadDriver.for_service(api, ns, NAME, rate=RATE, max_duration=timeout + 180) as load:
        wait_for(lambda: load.stats().responses >= 10, 60, f"{ns}: the load driver's first responses")
        stats = load.stats()
        published = time.time()
        version = system.trigger()
        trial = Trial(system.name, round_, version, published, query=system.query(version))
        trial.snapshot("start", stats)
        assert info.prometheus_url
        with system.observer(kube, info.prometheus_url, system.setup, trial, load):
            deadline = time.monotonic() + timeout
            while trial.stable_only is None and trial.promoted_seen is None:
                system.check_alive()
                if time.monotonic() > deadline:
                    trial.problems.append(f"no decision and traffic back on stable within {timeout:.0f} s")
                    break
                time.sleep(0.2)
            time.sleep(2)  # the driver refreshes its endpoints every second: let it see the canary gone
        trial.snapshot("end", load.stats())
    trial.ended = time.time()
    trial.controller_cpu_seconds = {name: round(argo.cpu_seconds(pid) - cpu_before[name], 3)
                                    for name, pid in pids.items() if pid and name in cpu_before}  # fmt: skip
    if trial.promoted_seen is not None:
        trial.problems.append("the bad version was promoted")
    system.check(trial)
    system.reset(trial)
    first = next((v for _, v in trial.prometheus if v is not None), None)
    if first is not None and first <= THRESHOLD:
        trial.notes.append(f"the canary's first error ratio in Prometheus was {first:.2f}, under the threshold")
    return trial


# --------------------------------------------------------------------------- summary


def status_query(trials: list[dict[str, Any]]) -> str | None:
    """The errorRate PromQL Slipway ran (``status.analysis[].query``), its revision hash made ``<revision>``."""
    for trial in trials:
        for analysis in trial.get("analyses") or []:
            if trial["system"] == "slipway" and analysis.get("query"):
                return re.sub(r'slipway_dev_revision="[^"]*"', 'slipway_dev_revision="<revision>"', analysis["query"])
    return None


def summarize(trials: list[dict[str, Any]], systems: list[str]) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    for system in systems:
        mine = [t for t in trials if t["system"] == system]
        row: dict[str, Any] = {"trials": len(mine), "problems": sum(1 for t in mine if t["problems"])}
        for key in (
            "ready_to_decision",
            "ready_to_stable_only",
            "ready_to_breach_visible",
            "breach_visible_to_decision",
            "ready_to_decision_stamp",
            "decision_to_stable_only",
            "published_to_canary_ready",
        ):
            values = [t["derived"][key] for t in mine if t["derived"].get(key) is not None]
            row[key] = {"n": len(values), "p50": percentile(values, 0.5), "p90": percentile(values, 0.9),
                        "min": min(values, default=None), "max": max(values, default=None)}  # fmt: skip
        for key in ("fivexx", "fivexx_after_decision", "requests"):
            values = [t[key] for t in mine if t.get(key) is not None]
            row[key] = {"n": len(values), "p50": percentile(values, 0.5), "total": sum(values)}
        rows[system] = row
    return rows


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def trial_line(record: dict[str, Any], seconds: float) -> str:
    d = record["derived"]
    line = (
        f"round {record['round']} {record['system']} v{record['version']}: ready→decision "
        f"{fmt(d['ready_to_decision'])}s, ready→stable {fmt(d['ready_to_stable_only'])}s, breach visible "
        f"{fmt(d['ready_to_breach_visible'])}s, analyses {d['analyses']}, 5xx {record['fivexx']} "
        f"({record['fivexx_after_decision']} after), endpoints {record['endpoints_at_canary_ready']}; {seconds:.0f}s"
    )
    return line + (f"; PROBLEMS {record['problems']}" if record["problems"] else "")


# --------------------------------------------------------------------------- the run


def run(run_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    systems = [s.strip() for s in args.rollback_systems.split(",") if s.strip()]
    if not systems or any(s not in SYSTEMS for s in systems):
        raise SystemExit(f"--rollback-systems takes {', '.join(SYSTEMS)}")
    interval, failure_limit = args.rollback_interval, args.rollback_failure_limit
    ports = random.sample(range(20000, 30000), 2)
    setups = {s: Setup(interval, failure_limit, port, system=s) for s, port in zip(SYSTEMS, ports, strict=True)}
    floor = setups["slipway"].floor_seconds
    data: dict[str, Any] = {
        "scenario": "A",
        "config": {
            "interval_seconds": parse_seconds(interval),
            "failure_limit": failure_limit,
            "rps": RATE,
            "error_rate": float(ERROR_RATE),
            "threshold": THRESHOLD,
            "stable_replicas": 2,
            "canary_pods": 1,
            "scrape_interval_seconds": SCRAPE_SECONDS,
            "rate_window_seconds": setups["slipway"].window_seconds,
            "query": {
                "slipway": setups["slipway"].error_ratio_query("<version>"),
                "argo": setups["argo"].argo_query(),
            },  # fmt: skip
            "slipway": {
                "namespace": SLIPWAY_NS,
                "steps": setups["slipway"].deployment()["spec"]["rollout"]["steps"],
                "autoscaling": {"minReplicas": 2, "maxReplicas": 2},
                "maxSurgeReplicas": 1,
            },  # fmt: skip
            "argo": {
                "namespace": ARGO_NS,
                "replicas": args.argo_replicas,
                "steps": [{"setWeight": ARGO_WEIGHT}, {"pause": {"duration": "5m"}}],
                "maxSurge": 1,
                "maxUnavailable": 0,
                "analysis": "background, startingStep 1",
                "version": argo.VERSION,
            },  # fmt: skip
            "systems": systems,
            "trials_per_system": args.trials,
        },
        "floor_seconds": floor,
        "two_sample_bound_seconds": setups["slipway"].two_sample_seconds,
        "trials": [],
        "notes": [
            "decision is the first poll (every 0.25 s) that saw it: Slipway phase RolledBack with status.lastRollback "
            "of the version; Argo status.abort or the AnalysisRun Failed, whichever came first. decision_stamp is the "
            "controller's own timestamp (Slipway lastRollback.time, Argo the deciding measurement's finishedAt or "
            "status.abortedAt), whole seconds, truncated",
            "canary_ready is the canary pod's Ready condition, first seen by the bench",
            "stable_only: the first poll after the decision with no ready canary endpoint in the Service's "
            "EndpointSlices",
            "one system active at a time: both controllers run throughout, the other system's objects are settled "
            "and idle (no new version, no load); each trial records both controllers' CPU seconds "
            "(controller_cpu_seconds)",
            "same PromQL: Slipway's built-in canary 5xx ratio over the same 20 s window; config.query.slipway is the "
            "query Slipway ran (status.analysis[].query), which selects its canary's pods by their revision label "
            "(slipway_dev_revision), Argo's by the model version label of its canary ReplicaSet's pods "
            "(slipway_dev_model_version, from args): both select exactly the canary's pods. Argo's pods get "
            "slipway.dev/track from canaryMetadata/stableMetadata, so Prometheus gives them the same labels",
            f"Argo: spec.replicas {args.argo_replicas}, setWeight {ARGO_WEIGHT}, maxSurge 1: Argo's replica "
            "arithmetic (approximateWeightedCanaryStableReplicaCounts) picks 1 canary + 2 stable (3 pods, 33.3%), "
            "the same shape as Slipway's 2 stable + 1 surge canary; endpoints_at_canary_ready records what each trial "
            "saw",
            "Argo's AnalysisTemplate has only failureCondition `len(result) > 0 && result[0] > 0.05`: no data passes "
            "(counts neither way), as Slipway's noData: inconclusive does not count toward failureLimit",
        ],
    }
    started = time.time()
    operator: Operator | None = None
    controller: argo.Controller | None = None
    try:
        with local_cluster(args.rollback_keep_cluster_dir, prefix="slipway-bench-a-") as info:
            try:
                assert info.mlflow_url and info.prometheus_url
                admin = Kube(info.kubeconfig)
                install_crds(admin, ROOT / "crds")
                argo.install_crds(admin)
                for setup in setups.values():
                    create_namespace(admin, setup.namespace)
                env = operator_env(ROOT, audited_kubeconfig(info, SLIPWAY_USER), info.mlflow_url, info.prometheus_url,
                                   {})  # fmt: skip
                operator = Operator(ROOT, env, [SLIPWAY_NS], run_dir / "rollback-slipway-operator.log")
                data["slipway_imported_from"] = operator.check_import()
                operator.start()
                controller = argo.Controller(info, run_dir, log_name="rollback-argo-rollouts.log")
                controller.start()
                log(f"Slipway operator pid {operator.pid}, Argo Rollouts controller pid {controller.pid}")

                t0 = time.monotonic()
                run_id = train(info.mlflow_url)
                log(f"trained run {run_id} in {time.monotonic() - t0:.1f}s")
                api = api_client(info.kubeconfig)
                with MlflowClient(info.mlflow_url) as mlflow:
                    for setup in setups.values():
                        mlflow.get_or_create_registered_model(setup.model)
                        publish(mlflow, setup.model, run_id)
                    impls: dict[str, Slipway | Argo] = {
                        "slipway": Slipway(setups["slipway"], admin, mlflow, run_id, operator),
                        "argo": Argo(
                            setups["argo"], admin, mlflow, run_id, controller, info.mlflow_url, args.argo_replicas
                        ),  # fmt: skip
                    }
                    admin.create(slipway_path(SLIPWAY_NS, "inferencedeployments"), setups["slipway"].deployment())
                    argo_impl = impls["argo"]
                    assert isinstance(argo_impl, Argo)
                    for collection, body in argo_impl.objects():
                        admin.create(collection, body)
                    t0 = time.monotonic()
                    settle_deployments(admin, mlflow, [setups["slipway"]], operator, args.rollback_ready_timeout)
                    argo_impl.settle(args.rollback_ready_timeout)
                    data["v1_serving_seconds"] = round(time.monotonic() - t0, 1)
                    log(f"version 1 serving on both after {data['v1_serving_seconds']} s")
                    pids = {"slipway": operator.pid, "argo": controller.pid}
                    for round_ in range(1, args.trials + 1):
                        for name in systems:
                            t0 = time.monotonic()
                            trial = run_trial(impls[name], admin, info, api, round_, args.rollback_trial_timeout, pids)
                            record = trial.record()
                            data["trials"].append(record)
                            log(trial_line(record, time.monotonic() - t0))
                            rundir.write(run_dir, "rollback", data)  # partial results survive a crash
            finally:
                if operator is not None:
                    operator.stop()
                if controller is not None:
                    controller.stop()
    finally:
        data["wall_seconds"] = round(time.time() - started, 1)
        if ran := status_query(data["trials"]):
            data["config"]["query"]["slipway"] = ran
        if data["trials"]:
            data["summary"] = summarize(data["trials"], systems)
        if operator is not None:
            data["slipway_log"] = log_findings(operator.log_path) | {"path": operator.log_path.name}
        if controller is not None:
            data["argo_log"] = {"path": controller.log_path.name, "starts": controller.starts}
        data["image"] = IMAGE
        rundir.write(run_dir, "rollback", data)
    for system, row in (data.get("summary") or {}).items():
        d, s = row["ready_to_decision"], row["ready_to_stable_only"]
        print(f"{system}: {row['trials']} trials, ready→decision p50 {fmt(d['p50'])} p90 {fmt(d['p90'])} min "
              f"{fmt(d['min'])}; ready→stable p50 {fmt(s['p50'])} p90 {fmt(s['p90'])}; 5xx p50 "
              f"{fmt(row['fivexx']['p50'])}; problems {row['problems']}")  # fmt: skip
    print(f"floor {floor:.0f} s; written {run_dir / 'rollback.json'}")
    return data
