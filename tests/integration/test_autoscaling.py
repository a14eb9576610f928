"""Autoscaled inference replicas, for real: the InferenceDeployment's HPA reads CPU from
metrics-server (which reads the node agents' kubelet API), the real HPA controller scales
the stable track to its maximum under load and back to its minimum once load stops."""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from localkube.wait import wait_for
from slipway.mlflow import MlflowClient
from slipway_e2e.loadgen import LoadDriver
from slipway_testing import apply_object, report, train_run, wait_status

pytestmark = pytest.mark.cluster


def test_cpu_target_scales_the_stable_track_to_max_under_load_and_back(kube_api, namespace, operator, cluster):
    operator()
    model = f"digits-{namespace}"
    run_id = train_run(cluster.mlflow_url, "autoscaling-tests", steps=4)
    with MlflowClient(cluster.mlflow_url) as mlflow:
        mlflow.get_or_create_registered_model(model)
        version = mlflow.create_model_version(model, f"runs:/{run_id}/model", run_id, {}).version
        mlflow.set_alias(model, "candidate", version)
    apply_object(
        kube_api,
        namespace,
        {
            "apiVersion": "slipway.dev/v1alpha1",
            "kind": "InferenceDeployment",
            "metadata": {"name": "scaler"},
            "spec": {
                "model": {"name": model, "alias": "candidate"},
                "image": "ghcr.io/slipway-dev/slipway:0.1.0",
                "command": ["python", "-m", "slipway.workloads.serve"],
                # A small request, so that real inference load is a large share of it.
                "resources": {"cpu": "20m"},
                "autoscaling": {
                    "minReplicas": 2,
                    "maxReplicas": 4,
                    "metrics": [{"type": "Cpu", "targetAverageUtilization": 50}],
                },
            },
        },
    )
    wait_status(
        kube_api,
        namespace,
        "InferenceDeployment",
        "scaler",
        lambda o: (o.get("status") or {}).get("phase") == "Promoted",
        180,
        "serving",
    )
    apps = client.AppsV1Api(kube_api)
    hpas = client.AutoscalingV2Api(kube_api)

    def replicas() -> int:
        return apps.read_namespaced_deployment("scaler-stable", namespace).spec.replicas

    def utilization() -> int | None:
        status = hpas.read_namespaced_horizontal_pod_autoscaler("scaler", namespace).status
        for m in status.current_metrics or []:
            if m.resource and m.resource.name == "cpu":
                return m.resource.current.average_utilization
        return None

    # The HPA reads real CPU (no FailedGetResourceMetric) and holds the minimum at rest.
    wait_for(lambda: utilization() is not None, 90, "the HPA to read CPU from metrics.k8s.io")
    assert replicas() == 2

    with LoadDriver.for_service(kube_api, namespace, "scaler", rate=60, max_duration=400) as load:
        loaded = time.monotonic()
        wait_for(lambda: replicas() == 4, 240, "4 replicas under load", interval=2)
        up = time.monotonic() - loaded
        peak = utilization()
        wait_for(
            lambda: apps.read_namespaced_deployment("scaler-stable", namespace).status.ready_replicas == 4,
            120,
            "4 ready replicas",
        )
        stats = load.stats()
    stopped = time.monotonic()
    wait_for(lambda: replicas() == 2, 240, "back to 2 replicas once load stopped", interval=2)
    down = time.monotonic() - stopped
    assert stats.by_code.get(200, 0) > 0
    report(
        f"\nHPA on CPU (target 50% of 20m): 2 -> 4 replicas {up:.0f}s after load began (60 req/s, "
        f"utilization {peak}%), 4 -> 2 {down:.0f}s after it stopped (stabilization window 30s); "
        f"responses {dict(stats.by_code)}"
    )
