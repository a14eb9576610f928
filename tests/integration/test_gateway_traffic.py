"""GatewayAPI mode through a real data plane: the local cluster's gateway (Traefik v3, built
from the Go module proxy) routes by the weights Slipway writes into the HTTPRoute, so a
25% canary step sends a quarter of the requests to the canary."""

from __future__ import annotations

import pytest
from kubernetes import client

from localkube.gateway import ensure_gateway, gateway
from localkube.wait import wait_for
from slipway.mlflow import MlflowClient
from slipway_e2e.loadgen import LoadDriver
from slipway_testing import apply_object, get_object, report, wait_status

pytestmark = pytest.mark.cluster

REQUESTS = 2000


@pytest.fixture
def gateway_port(cluster) -> int:
    port = ensure_gateway(cluster.directory).gateway_port
    assert port
    return port


def test_a_25_percent_step_sends_a_quarter_of_the_requests_through_the_gateway(
    kube_api, namespace, operator, cluster, gateway_port, trained
):
    custom = client.CustomObjectsApi(kube_api)
    custom.create_namespaced_custom_object(
        "gateway.networking.k8s.io", "v1", namespace, "gateways", gateway("web", namespace, gateway_port)
    )
    operator()
    model = f"digits-{namespace}"
    run_id = trained
    mlflow = MlflowClient(cluster.mlflow_url)
    try:
        canary_step_through_gateway(kube_api, namespace, custom, mlflow, model, run_id, gateway_port)
    finally:
        mlflow.close()


def canary_step_through_gateway(kube_api, namespace, custom, mlflow, model, run_id, gateway_port) -> None:
    def publish() -> str:
        version = mlflow.create_model_version(model, f"runs:/{run_id}/model", run_id, {}).version
        mlflow.set_alias(model, "candidate", version)
        return version

    mlflow.get_or_create_registered_model(model)
    v1 = publish()
    body = {
        "apiVersion": "slipway.dev/v1alpha1",
        "kind": "InferenceDeployment",
        "metadata": {"name": "digits"},
        "spec": {
            "model": {"name": model, "alias": "candidate"},
            "image": "ghcr.io/slipway-dev/slipway:0.1.0",
            "command": ["python", "-m", "slipway.workloads.serve"],
            "autoscaling": {"minReplicas": 2, "maxReplicas": 2},
            "traffic": {"mode": "GatewayAPI", "parentRefs": [{"name": "web"}], "hostnames": ["digits.test"]},
            # One step held long enough to measure; no analysis (this test is about routing).
            "rollout": {"steps": [{"weight": 25, "pause": "10m"}], "maxSurgeReplicas": 1},
        },
    }
    apply_object(kube_api, namespace, body)

    def phase_and_version(phase: str, version: str):
        def check(obj):
            status = obj.get("status") or {}
            return status.get("phase") == phase and (status.get("stable") or {}).get("modelVersion") == version

        return check

    wait_status(kube_api, namespace, "InferenceDeployment", "digits", phase_and_version("Promoted", v1), 180, "v1")
    # The gateway accepted the route and serves it: every request to stable.
    wait_for(lambda: route_accepted(custom, namespace), 60, "the HTTPRoute Accepted by the gateway")
    with LoadDriver.for_address("127.0.0.1", gateway_port, host="digits.test", rate=20, max_duration=60) as load:
        wait_for(lambda: load.stats().responses >= 40, 30, "40 responses through the gateway")
        before = load.stats()
    assert set(before.by_version) == {v1}, before

    v2 = publish()

    def at_25(obj) -> bool:
        canary = (obj.get("status") or {}).get("canary") or {}
        return canary.get("weight") == 25 and canary.get("modelVersion") == v2

    wait_status(kube_api, namespace, "InferenceDeployment", "digits", at_25, 120, "the canary at 25%")
    route = custom.get_namespaced_custom_object("gateway.networking.k8s.io", "v1", namespace, "httproutes", "digits")
    weights = {b["name"]: b["weight"] for b in route["spec"]["rules"][0]["backendRefs"]}
    assert weights == {"digits-stable": 75, "digits-canary": 25}
    # Traefik reloads its configuration a moment after the route changes: wait for a canary answer.
    with LoadDriver.for_address("127.0.0.1", gateway_port, host="digits.test", rate=20, max_duration=30) as probe:
        wait_for(lambda: probe.stats().by_version.get(v2), 30, "a first answer from the canary")

    with LoadDriver.for_address(
        "127.0.0.1", gateway_port, host="digits.test", rate=100, concurrency=16, max_duration=120
    ) as load:
        wait_for(lambda: load.stats().responses >= REQUESTS, 100, f"{REQUESTS} responses", interval=0.5)
        stats = load.stop()
    canary = stats.by_version.get(v2, 0)
    total = sum(stats.by_version.values())
    share = canary / total
    assert stats.by_code.get(200, 0) == stats.responses, stats.by_code
    assert get_object(kube_api, namespace, "InferenceDeployment", "digits")["status"]["canary"]["weight"] == 25
    assert 0.20 <= share <= 0.30, f"canary served {canary} of {total} ({share:.1%}) at a 25% step"
    report(
        f"\ngateway (Traefik) at a 25% step: canary {canary} of {total} responses ({share:.1%}), "
        f"stable {stats.by_version.get(v1, 0)}; codes {stats.by_code}"
    )


def route_accepted(custom: client.CustomObjectsApi, namespace: str) -> bool:
    route = custom.get_namespaced_custom_object("gateway.networking.k8s.io", "v1", namespace, "httproutes", "digits")
    for parent in (route.get("status") or {}).get("parents") or []:
        conditions = {c["type"]: c["status"] for c in parent.get("conditions") or []}
        if conditions.get("Accepted") == "True" and conditions.get("ResolvedRefs") == "True":
            return True
    return False
