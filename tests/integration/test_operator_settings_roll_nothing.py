"""The operator's own settings are no part of a revision, on the local cluster: a serving fleet with
spec.modelLoad, then the operator restarted with another image, another fetch image, MLflow at
another address (the same server under another name) and TLS files for the pods. Its passes restart
no pod, edit no Deployment and start no canary; the next model version's canary gets the new fetch
image and the TLS files."""

from __future__ import annotations

import pytest
from kubernetes import client
from prometheus_client import REGISTRY

from localkube.wait import wait_for
from slipway.mlflow import MlflowClient
from slipway.settings import SETTINGS
from slipway_testing import Versions, apply_object, inference_deployment, pods_of, report, serving, status_of

pytestmark = pytest.mark.cluster

NEW_IMAGE = "ghcr.io/slipway-dev/slipway:0.2.0"
# The fetch image by default: the operator's workload image (the workloads image of its version).
DEFAULT_FETCH = next(s.default for s in SETTINGS if s.name == "workload_image")
NEW_FETCH = "registry.example/slipway-fetch@sha256:" + "b" * 64


def passes() -> float:
    """InferenceDeployment passes of the in-process operator so far (slipway_reconcile_total)."""
    return sum(
        s.value
        for m in REGISTRY.collect()
        if m.name == "slipway_reconcile"
        for s in m.samples
        if s.name.endswith("_total") and s.labels.get("kind") == "InferenceDeployment"
    )


def progressing(api: client.ApiClient, namespace: str) -> int:
    """Progressing Events of `digits` so far (a rollout started), repeats counted."""
    events = client.CoreV1Api(api).list_namespaced_event(namespace, field_selector="involvedObject.name=digits")
    return sum(e.count or 1 for e in events.items if e.reason == "Progressing")


def fetch_image(deployment: client.V1Deployment) -> str:
    (init,) = deployment.spec.template.spec.init_containers
    return str(init.image)


def test_new_operator_image_fetch_image_and_mlflow_address_roll_nothing(
    kube_api, namespace, operator, cluster, trained, monkeypatch
):
    apps = client.AppsV1Api(kube_api)
    op = operator()
    with MlflowClient(cluster.mlflow_url) as mlflow:
        versions = Versions(mlflow, f"digits-{namespace}", trained)
        v1 = versions.publish()
        rollout = {"steps": [{"weight": 50, "pause": "10m"}]}
        body = inference_deployment("digits", versions.model, replicas=2, modelLoad={}, rollout=rollout)
        apply_object(kube_api, namespace, body)
        serving(kube_api, namespace, v1, timeout=180)
        wait_for(lambda: len([p for p in pods_of(kube_api, namespace, "stable") if p.status.phase == "Running"]) == 2,
                 60, "2 stable pods running")  # fmt: skip
        uids = {p.metadata.uid for p in pods_of(kube_api, namespace, "stable")}
        stable = apps.read_namespaced_deployment("digits-stable", namespace)
        before, rollouts = status_of(kube_api, namespace), progressing(kube_api, namespace)
        assert fetch_image(stable) == DEFAULT_FETCH

        monkeypatch.setenv("SLIPWAY_WORKLOAD_IMAGE", NEW_IMAGE)
        monkeypatch.setenv("SLIPWAY_FETCH_IMAGE", NEW_FETCH)
        monkeypatch.setenv("SLIPWAY_MLFLOW_CA_CONFIGMAP", "corp-ca")  # TLS files for the pods, from now on
        monkeypatch.setenv("SLIPWAY_MLFLOW_CLIENT_CERT_SECRET", "mlflow-client")
        moved = cluster.mlflow_url.replace("127.0.0.1", "localhost")
        assert moved != cluster.mlflow_url
        op.mlflow_url = moved
        op.restart()
        start = passes()
        wait_for(lambda: passes() >= start + 2, 60, "two passes of the restarted operator")

        after = apps.read_namespaced_deployment("digits-stable", namespace)
        restarted = uids - {p.metadata.uid for p in pods_of(kube_api, namespace, "stable")}
        canaries = [p.metadata.name for p in pods_of(kube_api, namespace, "canary")]
        started = progressing(kube_api, namespace) - rollouts
        status = status_of(kube_api, namespace)
        report(
            f"pods restarted {len(restarted)} of {len(uids)}, canary pods {len(canaries)}, rollouts started {started}"
        )
        assert not restarted and not canaries and not started
        assert after.metadata.generation == stable.metadata.generation  # the template was not written
        assert fetch_image(after) == DEFAULT_FETCH
        assert status["phase"] == "Promoted" and status["stable"]["revision"] == before["stable"]["revision"]

        # The next revision gets the new fetch image and MLflow address.
        v2 = versions.publish()

        def canary_made() -> client.V1Deployment | None:
            found = apps.list_namespaced_deployment(namespace, field_selector="metadata.name=digits-canary").items
            return found[0] if found and found[0].spec.template.metadata.labels.get(
                "slipway.dev/model-version") == v2 else None  # fmt: skip

        canary = wait_for(canary_made, 60, f"a canary Deployment serving version {v2}")
        assert fetch_image(canary) == NEW_FETCH
        env = {e.name: e.value for e in canary.spec.template.spec.init_containers[0].env}
        assert env["MLFLOW_TRACKING_URI"] == moved
        assert env["MLFLOW_TRACKING_SERVER_CERT_PATH"] == "/etc/slipway-tls/mlflow-ca/ca.crt"
        kept = {e.name for e in after.spec.template.spec.init_containers[0].env}
        assert "MLFLOW_TRACKING_SERVER_CERT_PATH" not in kept  # the stable as it was
