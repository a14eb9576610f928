"""Any model server, canaried through the gateway: models logged by MLflow's own client, served by
MLflow's own scoring server (``mlflow models serve``, which exports no Prometheus metrics), judged
by the analysis preset ``gateway`` from the gateway's own series (Traefik's service metrics,
scraped by the cluster's Prometheus). A healthy version is promoted step by step; a version that
fails a share of its requests with 500 is rolled back by the gateway's error rate.

The test has a gateway of its own (:func:`localkube.gateway.private_gateway`, Traefik with
Prometheus metrics, watching this namespace only), scraped as a job of its own, which the operator
reads (``SLIPWAY_TRAEFIK_SELECTOR``)."""

from __future__ import annotations

import json
import re
import subprocess
import time

import httpx
import pytest
from kubernetes import client

from localkube.gateway import gateway, private_gateway
from localkube.wait import wait_for
from slipway.mlflow import MlflowClient
from slipway_e2e import dashboard, monitoring
from slipway_e2e.loadgen import LoadDriver
from slipway_testing import ROOT, apply_object, get_object, inference_deployment, report, wait_status

pytestmark = pytest.mark.cluster

FAILING = 0.3  # the faulty version's share of requests answered 500
MLFLOW = ROOT / ".cache" / "mlflow-venv" / "bin" / "mlflow"
MLFLOW_PYTHON = MLFLOW.parent / "python"
HOST = "scorer.test"

LOG = """
import json, random, sys
import numpy, mlflow, mlflow.pyfunc
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import INTERNAL_ERROR

class Scorer(mlflow.pyfunc.PythonModel):
    def __init__(self, failing):
        self.failing = failing

    def predict(self, context, model_input, params=None):
        if random.random() < self.failing:  # a dependency of the model failing: MLflow answers 500
            raise MlflowException("the feature store timed out", error_code=INTERNAL_ERROR)
        return [float(sum(row)) for row in numpy.asarray(model_input, dtype=float).tolist()]

mlflow.set_tracking_uri(sys.argv[1]); mlflow.set_experiment(sys.argv[2])
versions = []
for failing in (0.0, 0.0, float(sys.argv[4])):
    with mlflow.start_run():
        info = mlflow.pyfunc.log_model(name="model", python_model=Scorer(failing), pip_requirements=["mlflow"])
    versions.append(mlflow.register_model(f"models:/{info.model_id}", sys.argv[3]).version)
print(json.dumps({"versions": [str(v) for v in versions]}))
"""

SERVE = f'exec {MLFLOW} models serve -m "$SLIPWAY_MODEL_URI" --env-manager local -h "$POD_IP" -p "$PORT"'
COUNTER = re.compile(r'^traefik_service_requests_total\{code="(\d+)",method="[A-Z]+",protocol="http",'
                     r'service="([^"]+)"\} ([0-9.e+]+)$', re.M)  # fmt: skip


def mlflow_client(script: str, *args: str) -> dict:
    """Run ``script`` with MLflow's own client (its virtualenv); its last line of output, as JSON."""
    if not MLFLOW_PYTHON.exists():
        pytest.fail(f"{MLFLOW_PYTHON.relative_to(ROOT)} is missing: run `make mlflow-env`")
    done = subprocess.run([str(MLFLOW_PYTHON), "-c", script, *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def deployment(model: str, mlflow_url: str) -> dict:
    ping = {"path": "/ping", "periodSeconds": 1}
    analysis = {
        "preset": "gateway",
        "gateway": "traefik",
        "interval": "10s",
        "failureLimit": 1,
        "metrics": [{"name": "errorRate", "max": 0.05}, {"name": "latencyP95Seconds", "max": 2.0}],
    }
    return inference_deployment(
        "scorer",
        model,
        image="ghcr.io/mlflow/mlflow:v3.17.2",
        command=["/bin/sh", "-c", SERVE],
        env=[{"name": "MLFLOW_TRACKING_URI", "value": mlflow_url}],
        probes={"startup": {**ping, "failureThreshold": 120}, "readiness": ping, "liveness": ping},
        traffic={"mode": "GatewayAPI", "parentRefs": [{"name": "web"}], "hostnames": [HOST]},
        rollout={
            "steps": [{"weight": 25, "pause": "20s"}, {"weight": 50, "pause": "20s"}],
            "maxSurgeReplicas": 1,
            "scaleDownDelaySeconds": 0,
            "analysis": analysis,
        },
    )


def counters(admin: int, namespace: str) -> dict[tuple[str, str], float]:
    """Traefik's request counters of this namespace's track Services, by (track, code)."""
    text = httpx.get(f"http://127.0.0.1:{admin}/metrics", timeout=5).text
    out: dict[tuple[str, str], float] = {}
    for code, service, value in COUNTER.findall(text):
        found = re.search(rf"-svc-{namespace}-scorer-(canary|stable)-\d+@kubernetesgateway$", service)
        if found:
            out[(found.group(1), code)] = out.get((found.group(1), code), 0) + float(value)
    return out


def delta(after: dict, before: dict) -> dict[tuple[str, str], float]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0) > 0}


class Steps:
    """Watches the InferenceDeployment and the gateway's counters: what each step's canary was sent."""

    def __init__(self, kube_api, namespace: str, admin: int) -> None:
        self.kube_api, self.namespace, self.admin = kube_api, namespace, admin
        self.weight: int | None = None
        self.mark = counters(admin, namespace)
        self.sent: dict[int, dict[tuple[str, str], float]] = {}
        self.started = time.monotonic()
        self.seen: list[tuple[float, int | None]] = []  # (seconds since the alias moved, canary weight)

    def status(self) -> dict:
        obj = get_object(self.kube_api, self.namespace, "InferenceDeployment", "scorer")
        status = obj.get("status") or {}
        weight = (status.get("canary") or {}).get("weight")
        if weight != self.weight:  # a step ends: what the gateway sent each track during it
            now = counters(self.admin, self.namespace)
            self.seen.append((round(time.monotonic() - self.started, 1), weight))
            if self.weight:
                self.sent[self.weight] = delta(now, self.mark)
            self.weight, self.mark = weight, now
        return status

    def shares(self) -> str:
        def share(sent: dict) -> str:
            canary = sum(v for (t, _), v in sent.items() if t == "canary")
            total = sum(sent.values())
            return f"{canary:.0f}/{total:.0f} ({canary / total:.0%})" if total else "none"

        steps = ", ".join(f"{w}%: {share(s)}" for w, s in sorted(self.sent.items()))
        return f"{steps} (canary weight from s after the alias moved: {self.seen})"


def test_mlflow_models_serve_is_canaried_and_rolled_back_by_the_gateways_metrics(
    kube_api, namespace, operator, cluster, mlflow: MlflowClient, monkeypatch
):
    began = time.time()
    model = f"scorer-{namespace}"
    versions = mlflow_client(LOG, cluster.mlflow_url, f"gateway-{namespace}", model, str(FAILING))["versions"]
    with private_gateway(cluster.directory, namespace) as gw:
        web = gateway("web", namespace, gw.port, gw.gateway_class)
        client.CustomObjectsApi(kube_api).create_namespaced_custom_object(
            "gateway.networking.k8s.io", "v1", namespace, "gateways", web
        )
        monkeypatch.setenv("SLIPWAY_TRAEFIK_SELECTOR", f'job="{gw.job}",namespace=""')  # its own scrape job
        operator()
        mlflow.set_alias(model, "candidate", versions[0])
        apply_object(kube_api, namespace, deployment(model, cluster.mlflow_url))
        load = LoadDriver.for_address("127.0.0.1", gw.port, host=HOST, path="/invocations",
                                      body={"inputs": [[1.0, 2.0]]}, rate=20, max_duration=600)  # fmt: skip
        with load:
            canary_then_rollback(kube_api, namespace, gw.admin, mlflow, model, versions, load)
        # The dashboard's gateway row shows this deployment's tracks from the gateway's series (its other
        # rows read the operator's own series: this operator runs in the test's process, unscraped).
        row = [dashboard.PRESET_ROWS["gateway"]]
        values = {"namespace": namespace, "name": "scorer"}
        shown = monitoring.panel_series(cluster.prometheus_url, row, values, began, time.time())
    report(f"\ndashboard panels of the gateway preset ({values}):\n{monitoring.report_panels(shown)}")
    assert all(shown.values()), shown


def stable_is(version: str):
    def check(obj: dict) -> bool:
        status = obj.get("status") or {}
        return status.get("phase") == "Promoted" and (status.get("stable") or {}).get("modelVersion") == version

    return check


def canary_then_rollback(kube_api, namespace, admin, mlflow, model, versions, load) -> None:
    v1, v2, v3 = versions
    wait_status(kube_api, namespace, "InferenceDeployment", "scorer", stable_is(v1), 240, "v1 serving")
    wait_for(lambda: load.stats().by_code.get(200, 0) >= 20, 60, "20 answers of MLflow's server through the gateway")
    steps = Steps(kube_api, namespace, admin)
    mlflow.set_alias(model, "candidate", v2)
    moved = steps.started = time.monotonic()
    wait_for(lambda: stable_is(v2)({"status": steps.status()}), 300, "v2 promoted by the gateway's metrics")
    promoted_after = time.monotonic() - moved
    healthy = steps.shares()
    assert {25, 50} <= set(steps.sent), steps.sent
    assert all(code == "200" for sent in steps.sent.values() for _, code in sent), steps.sent

    faulty = Steps(kube_api, namespace, admin)
    mlflow.set_alias(model, "candidate", v3)
    moved = faulty.started = time.monotonic()

    def rolled_back() -> bool:
        status = faulty.status()
        return (status.get("lastRollback") or {}).get("modelVersion") == v3

    wait_for(rolled_back, 300, "v3 rolled back by the gateway's error rate")
    rollback_after = time.monotonic() - moved
    status = get_object(kube_api, namespace, "InferenceDeployment", "scorer")["status"]
    sent = delta(counters(admin, namespace), faulty.mark)
    for during in faulty.sent.values():
        for key, value in during.items():
            sent[key] = sent.get(key, 0) + value
    canary_total = sum(v for (t, _), v in sent.items() if t == "canary")
    canary_errors = sum(v for (t, c), v in sent.items() if t == "canary" and c.startswith("5"))
    report(
        f"\nmlflow models serve through the gateway (Traefik), preset gateway: v2 promoted "
        f"{promoted_after:.1f} s after the alias moved, canary share of the gateway's requests per step: {healthy}; "
        f"faulty v3: {canary_errors:.0f} of {canary_total:.0f} canary requests answered 5xx "
        f"({canary_errors / max(canary_total, 1):.1%}), rolled back {rollback_after:.1f} s after the alias moved "
        f"(steps seen: {faulty.shares() or 'none'}); lastRollback: {status['lastRollback']}"
    )  # fmt: skip
    rollback = status["lastRollback"]
    assert (rollback["reason"], rollback["metric"]) == ("AnalysisFailed", "errorRate"), rollback
    assert rollback["value"] > 0.05 and rollback["modelVersion"] == v3, rollback  # the gateway's 5xx share
    assert canary_errors > 0 and (status.get("stable") or {}).get("modelVersion") == v2
