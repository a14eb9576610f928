"""GatewayAPI mode through a real data plane: the local cluster's gateway (Traefik v3, built
from the Go module proxy) routes by the weights Slipway writes into the HTTPRoute, so a
25% canary step sends a quarter of the requests to the canary; an abort takes the canary out of
the route at once and keeps its pod, with no traffic, for spec.rollout.scaleDownDelaySeconds."""

from __future__ import annotations

import time
from datetime import datetime

import pytest
from kubernetes import client

from localkube.gateway import ensure_gateway, gateway
from localkube.wait import wait_for
from slipway.mlflow import MlflowClient
from slipway_e2e.loadgen import LoadDriver
from slipway_testing import apply_object, get_object, inference_deployment, report, wait_status

pytestmark = pytest.mark.cluster

REQUESTS = 2000
DELAY = 20  # spec.rollout.scaleDownDelaySeconds


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
    body = inference_deployment(
        "digits",
        model,
        replicas=2,
        traffic={"mode": "GatewayAPI", "parentRefs": [{"name": "web"}], "hostnames": ["digits.test"]},
        # One step held long enough to measure; no analysis (this test is about routing).
        rollout={"steps": [{"weight": 25, "pause": "10m"}], "maxSurgeReplicas": 1, "scaleDownDelaySeconds": DELAY},
    )
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
    abort_and_hold_out(kube_api, namespace, custom, gateway_port, v2)


def abort_and_hold_out(kube_api, namespace, custom, gateway_port, v2: str) -> None:
    """An abort under load: the route and the Service over both tracks drop the canary at once, its pod
    stays (ready, answering nothing) for the scale-down delay, then goes; every request answered 200."""
    apps, core = client.AppsV1Api(kube_api), client.CoreV1Api(kube_api)

    def canary_replicas() -> int:
        return apps.read_namespaced_deployment("digits-canary", namespace).spec.replicas or 0

    with LoadDriver.for_address("127.0.0.1", gateway_port, host="digits.test", rate=20, max_duration=120) as load:
        wait_for(lambda: load.stats().responses >= 20, 30, "20 responses before the abort")
        custom.patch_namespaced_custom_object("slipway.dev", "v1alpha1", namespace, "inferencedeployments", "digits",
                                              {"metadata": {"annotations": {"slipway.dev/abort": "true"}}})  # fmt: skip
        aborted = wait_status(kube_api, namespace, "InferenceDeployment", "digits",
                              lambda o: (o["status"].get("lastRollback") or {}).get("reason") == "Aborted", 60,
                              "the abort carried out")  # fmt: skip
        recorded = time.monotonic()

        def weights() -> dict[str, int]:
            route = custom.get_namespaced_custom_object("gateway.networking.k8s.io", "v1", namespace, "httproutes",
                                                        "digits")  # fmt: skip
            return {b["name"]: b["weight"] for b in route["spec"]["rules"][0]["backendRefs"]}

        # The rollback is on record before the pass acts on it (a restart carries it out); the same
        # pass moves the route right after.
        seen: list[dict[str, int]] = []
        try:
            wait_for(lambda: seen.append(weights()) or seen[-1] == {"digits-stable": 100, "digits-canary": 0}, 5,
                     "the route at 100/0 in the pass that recorded the rollback", interval=0.1)  # fmt: skip
        except TimeoutError as e:
            raise AssertionError(f"{e}; the route's weights last read: {seen[-1:]}") from e
        route_lag = time.monotonic() - recorded
        selector = core.read_namespaced_service("digits", namespace).spec.selector
        assert selector == {"slipway.dev/deployment": "digits", "slipway.dev/track": "stable"}, selector
        # Traefik reloads: wait until 60 answers in a row came from the stable.
        marks: list[tuple[int, int]] = []

        def canary_silent() -> bool:
            now = load.stats()
            marks.append((now.responses, now.by_version.get(v2, 0)))
            return any(r <= now.responses - 60 and c == marks[-1][1] for r, c in marks)

        wait_for(canary_silent, 30, "60 answers in a row from the stable", interval=0.5)
        silent_from = marks[-1][1]
        held = canary_replicas()
        ready = [p for p in core.list_namespaced_pod(namespace, label_selector="slipway.dev/track=canary").items
                 if any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])]  # fmt: skip
        wait_for(lambda: canary_replicas() == 0, DELAY + 30, "the canary scaled to 0 after the delay", interval=0.5)
        gone_at = time.time()
        wait_for(lambda: not core.list_namespaced_pod(namespace, label_selector="slipway.dev/track=canary").items,
                 60, "the canary's pod gone")  # fmt: skip
        wait_for(lambda: load.stats().responses >= marks[-1][0] + 40, 30, "40 answers after the pod went")
        stats = load.stop()
    rolled_back = datetime.fromisoformat(aborted["status"]["lastRollback"]["time"].replace("Z", "+00:00"))
    waited = gone_at - rolled_back.timestamp()
    report(f"abort through the gateway: route 100/0 {route_lag:.2f} s after the rollback was seen, "
           f"the canary's pod kept ready with no traffic "
           f"({held} replica, {len(ready)} ready) and scaled to 0 {waited:.1f} s after the rollback "
           f"(scaleDownDelaySeconds {DELAY}); codes {stats.by_code}, canary answers after the route moved: "
           f"{stats.by_version.get(v2, 0) - silent_from}")  # fmt: skip
    assert held == 1 and len(ready) == 1
    assert DELAY - 2 <= waited <= DELAY + 15, waited
    assert stats.by_code.get(200, 0) == stats.responses, stats.by_code
    assert stats.by_version.get(v2, 0) == silent_from  # none once the gateway had moved


def route_accepted(custom: client.CustomObjectsApi, namespace: str) -> bool:
    route = custom.get_namespaced_custom_object("gateway.networking.k8s.io", "v1", namespace, "httproutes", "digits")
    for parent in (route.get("status") or {}).get("parents") or []:
        conditions = {c["type"]: c["status"] for c in parent.get("conditions") or []}
        if conditions.get("Accepted") == "True" and conditions.get("ResolvedRefs") == "True":
            return True
    return False
