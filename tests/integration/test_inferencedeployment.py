"""InferenceDeployment end to end: real serving pods, Prometheus analysis, MLflow aliases, rollbacks."""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlparse

import pytest
from kubernetes import client

from localkube.wait import wait_for
from slipway.mlflow import MlflowClient
from slipway_e2e.loadgen import LoadDriver
from slipway_testing import TcpRelay, apply_object, condition, get_object, phase_in, report, train_run, wait_status

pytestmark = pytest.mark.cluster


SERVE = ["python", "-m", "slipway.workloads.serve"]


@pytest.fixture(scope="module")
def trained(cluster) -> str:
    """One trained model run; tests register versions of it under their own model names."""
    return train_run(cluster.mlflow_url, "idep-tests", steps=8)


@pytest.fixture
def mlflow(cluster):
    with MlflowClient(cluster.mlflow_url) as c:
        yield c


class Versions:
    def __init__(self, mlflow: MlflowClient, model: str, run_id: str) -> None:
        self.mlflow, self.model, self.run_id = mlflow, model, run_id
        mlflow.get_or_create_registered_model(model)

    def publish(self, **faults: str) -> str:
        """Register a version (with fault tags that travel with it) and move `candidate` to it."""
        tags = {f"slipway.fault.{k}": v for k, v in faults.items()}
        version = self.mlflow.create_model_version(self.model, f"runs:/{self.run_id}/model", self.run_id, tags)
        self.mlflow.set_alias(self.model, "candidate", version.version)
        return version.version

    def alias(self, name: str) -> str | None:
        found = self.mlflow.get_version_by_alias(self.model, name)
        return found.version if found else None


def deployment(model: str, **rollout: Any) -> dict[str, Any]:
    analysis = {
        "interval": "5s",
        "failureLimit": 1,
        "metrics": [
            {"name": "errorRate", "max": 0.05},
            {"name": "latencyP95Seconds", "maxRelativeToStable": 3},
        ],
    }
    return {
        "apiVersion": "slipway.dev/v1alpha1",
        "kind": "InferenceDeployment",
        "metadata": {"name": "digits"},
        "spec": {
            "model": {"name": model, "alias": "candidate"},
            "image": "ghcr.io/slipway-dev/slipway:0.1.0",
            "command": SERVE,
            "autoscaling": {"minReplicas": 2, "maxReplicas": 2},
            "rollout": {
                "steps": [{"weight": 25, "pause": "5s"}, {"weight": 50, "pause": "5s"}],
                "interval": "5s",
                "progressDeadlineSeconds": 40,
                "maxSurgeReplicas": 1,
                "analysis": analysis,
                **rollout,
            },
        },
    }


class CanaryWatch:
    """Samples the canary Deployment while a test waits, for the GPU budget assertion."""

    def __init__(self, kube_api, namespace: str) -> None:
        self.apps = client.AppsV1Api(kube_api)
        self.core = client.CoreV1Api(kube_api)
        self.namespace = namespace
        self.max_canary_pods = 0

    def sample(self) -> None:
        pods = self.core.list_namespaced_pod(self.namespace, label_selector="slipway.dev/track=canary").items
        running = [p for p in pods if p.metadata.deletion_timestamp is None]
        self.max_canary_pods = max(self.max_canary_pods, len(running))


def wait_phase(kube_api, namespace, phases, timeout, what, watch: CanaryWatch | None = None):
    def check(obj: dict[str, Any]) -> bool:
        if watch:
            watch.sample()
        return phase_in(*phases)(obj)

    return wait_status(kube_api, namespace, "InferenceDeployment", "digits", check, timeout, what)


def rolled_back(kube_api, namespace, version: str, watch: CanaryWatch, timeout: float = 120):
    def check(obj: dict[str, Any]) -> bool:
        watch.sample()
        return ((obj.get("status") or {}).get("lastRollback") or {}).get("modelVersion") == version

    return wait_status(kube_api, namespace, "InferenceDeployment", "digits", check, timeout, f"{version} rolled back")


def serving(kube_api, namespace, version: str, timeout: float = 120):
    return wait_status(
        kube_api,
        namespace,
        "InferenceDeployment",
        "digits",
        lambda o: (
            (o.get("status") or {}).get("phase") == "Promoted"
            and ((o["status"].get("stable") or {}).get("modelVersion") == version)
        ),
        timeout,
        f"version {version} promoted",
    )


def test_good_version_promoted_bad_versions_rolled_back(kube_api, namespace, operator, mlflow, trained):
    operator()
    versions = Versions(mlflow, f"digits-{namespace}", trained)
    v1 = versions.publish()
    apply_object(kube_api, namespace, deployment(versions.model))
    serving(kube_api, namespace, v1)
    assert versions.alias("production") == v1
    watch = CanaryWatch(kube_api, namespace)
    with LoadDriver.for_service(kube_api, namespace, "digits", rate=20, max_duration=600) as load:
        # A good version walks every step and is promoted.
        v2 = versions.publish()
        wait_phase(kube_api, namespace, ["Analyzing"], 90, "the canary analysed", watch)
        idep = serving(kube_api, namespace, v2, timeout=180)
        assert versions.alias("production") == v2
        analysis = {r["metric"]: r for r in idep["status"]["analysis"]}
        assert analysis["errorRate"]["result"] == "Passed" and analysis["errorRate"]["value"] == 0
        assert analysis["latencyP95Seconds"]["threshold"].startswith("<= 3 × stable")
        stable = client.AppsV1Api(kube_api).read_namespaced_deployment("digits-stable", namespace)
        assert stable.spec.template.metadata.labels["slipway.dev/model-version"] == v2

        # 30% errors on the canary: rolled back within failureLimit intervals, production unchanged.
        v3 = versions.publish(errorRate="0.3")
        breach = time.monotonic()
        idep = rolled_back(kube_api, namespace, v3, watch)
        back_on_stable = time.monotonic() - breach
        rollback = idep["status"]["lastRollback"]
        assert rollback["reason"] == "AnalysisFailed" and rollback["metric"] == "errorRate"
        assert rollback["modelVersion"] == v3 and rollback["value"] > 0.05
        assert "errorRate" in condition(idep, "Ready")["message"]
        assert versions.alias("production") == v2
        assert "AnalysisFailed" in mlflow.get_model_version(versions.model, v3).tags["slipway.dev/rollback"]

        # 3× slower than stable: fails maxRelativeToStable.
        v4 = versions.publish(latencySeconds="0.02")
        idep = rolled_back(kube_api, namespace, v4, watch)
        assert idep["status"]["lastRollback"]["metric"] == "latencyP95Seconds"

        # Crash-looping canary: rolled back at the progress deadline.
        v5 = versions.publish(crashOnStart="true")
        idep = rolled_back(kube_api, namespace, v5, watch)
        assert idep["status"]["lastRollback"]["reason"] == "ProgressDeadlineExceeded"
        stats = load.stats()
    assert versions.alias("production") == v2
    assert watch.max_canary_pods <= 1, f"canary pods exceeded maxSurgeReplicas: {watch.max_canary_pods}"
    report(
        f"\nbreach to traffic back on stable: {back_on_stable:.1f}s (analysis interval 5s, scrape 5s); "
        f"responses {dict(stats.by_code)}"
    )


def test_abort_rolls_back_at_once_and_paused_holds(kube_api, namespace, operator, mlflow, trained):
    operator()
    versions = Versions(mlflow, f"digits-{namespace}", trained)
    v1 = versions.publish()
    apply_object(kube_api, namespace, deployment(versions.model, paused=True))
    serving(kube_api, namespace, v1)
    with LoadDriver.for_service(kube_api, namespace, "digits", rate=10, max_duration=300):
        v2 = versions.publish()
        idep = wait_phase(kube_api, namespace, ["Paused"], 90, "paused")
        step = idep["status"]["currentStep"]
        held = time.monotonic()
        wait_for(lambda: time.monotonic() - held > 12, 20, "three step pauses", interval=1)
        idep = get_object(kube_api, namespace, "InferenceDeployment", "digits")
        assert idep["status"]["phase"] == "Paused" and idep["status"]["currentStep"] == step
        assert condition(idep, "Ready")["reason"] == "Paused"
        client.CustomObjectsApi(kube_api).patch_namespaced_custom_object(
            "slipway.dev",
            "v1alpha1",
            namespace,
            "inferencedeployments",
            "digits",
            {"metadata": {"annotations": {"slipway.dev/abort": "true"}}},
        )
        idep = wait_phase(kube_api, namespace, ["RolledBack"], 30, "aborted")
    assert idep["status"]["lastRollback"]["reason"] == "Aborted"
    assert idep["status"]["lastRollback"]["modelVersion"] == v2
    assert "slipway.dev/abort" not in (idep["metadata"].get("annotations") or {})
    assert versions.alias("production") == v1


def test_prometheus_outage_holds_the_rollout_then_it_resumes(kube_api, namespace, operator, mlflow, trained, cluster):
    url = urlparse(cluster.prometheus_url)
    relay = TcpRelay((url.hostname, url.port))
    relay.start()
    operator()
    versions = Versions(mlflow, f"digits-{namespace}", trained)
    v1 = versions.publish()
    body = deployment(versions.model)
    body["spec"]["rollout"]["analysis"]["prometheus"] = {"address": relay.url}
    apply_object(kube_api, namespace, body)
    serving(kube_api, namespace, v1)
    try:
        with LoadDriver.for_service(kube_api, namespace, "digits", rate=10, max_duration=300):
            relay.stop()
            v2 = versions.publish()
            idep = wait_status(
                kube_api,
                namespace,
                "InferenceDeployment",
                "digits",
                lambda o: (
                    condition(o, "Ready").get("reason") == "AnalysisInconclusive"
                    and "unreachable" in condition(o, "Ready")["message"]
                ),
                90,
                "the rollout held for lack of data",
            )
            assert idep["status"]["phase"] == "Paused"
            assert versions.alias("production") == v1
            relay.start()
            serving(kube_api, namespace, v2, timeout=180)
    finally:
        relay.stop()
    assert versions.alias("production") == v2


def test_gateway_api_mode_sets_exact_route_weights(kube_api, namespace, operator, mlflow, trained, cluster):
    from localkube.bootstrap import apply_gateway_api_crds
    from localkube.kube import Kube

    apply_gateway_api_crds(Kube(cluster.kubeconfig))
    operator()
    versions = Versions(mlflow, f"digits-{namespace}", trained)
    v1 = versions.publish()
    body = deployment(versions.model)
    body["spec"]["rollout"].pop("analysis")
    body["spec"]["traffic"] = {"mode": "GatewayAPI", "parentRefs": [{"name": "web"}], "hostnames": ["digits.test"]}
    wait_for(lambda: apply_object(kube_api, namespace, body), 30, "the InferenceDeployment (HTTPRoute CRD served)")
    serving(kube_api, namespace, v1)
    custom = client.CustomObjectsApi(kube_api)

    def route_weights() -> tuple[int, int]:
        route = custom.get_namespaced_custom_object(
            "gateway.networking.k8s.io", "v1", namespace, "httproutes", "digits"
        )
        backends = {b["name"]: b["weight"] for b in route["spec"]["rules"][0]["backendRefs"]}
        return backends["digits-stable"], backends["digits-canary"]

    assert route_weights() == (100, 0)
    v2 = versions.publish()
    seen: set[tuple[int, int]] = set()

    def promoted() -> bool:
        seen.add(route_weights())
        status = get_object(kube_api, namespace, "InferenceDeployment", "digits").get("status") or {}
        return status.get("phase") == "Promoted" and (status.get("stable") or {}).get("modelVersion") == v2

    wait_for(promoted, 180, "v2 promoted through the route's steps", interval=0.1)
    assert {(75, 25), (50, 50)} <= seen, seen
    assert route_weights() == (100, 0)
    for track in ("stable", "canary"):
        svc = client.CoreV1Api(kube_api).read_namespaced_service(f"digits-{track}", namespace)
        assert svc.spec.selector == {"slipway.dev/deployment": "digits", "slipway.dev/track": track}
    hpa = client.AutoscalingV2Api(kube_api).read_namespaced_horizontal_pod_autoscaler("digits", namespace)
    assert hpa.spec.scale_target_ref.name == "digits-stable"
    assert (hpa.spec.min_replicas, hpa.spec.max_replicas) == (2, 2)
