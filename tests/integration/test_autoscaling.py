"""Autoscaled inference replicas, for real: the InferenceDeployment's HPA reads CPU from
metrics-server (which reads the node agents' kubelet API) or a Pods metric from the custom
metrics adapter (which reads Prometheus), and the real HPA controller scales the stable
track to its maximum under load and back to its minimum once load stops."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client

from localkube.wait import wait_for
from slipway.mlflow import MlflowClient
from slipway_e2e.loadgen import LoadDriver
from slipway_testing import apply_object, inference_deployment, report, wait_status

pytestmark = pytest.mark.cluster


def serve(
    kube_api, namespace: str, cluster, run_id: str, name: str, spec: dict[str, Any], tags: dict[str, str]
) -> None:
    """Register a model version of ``run_id`` (with ``tags``), serve it as InferenceDeployment ``name``,
    wait until it serves."""
    model = f"{name}-{namespace}"
    with MlflowClient(cluster.mlflow_url) as mlflow:
        mlflow.get_or_create_registered_model(model)
        version = mlflow.create_model_version(model, f"runs:/{run_id}/model", run_id, tags).version
        mlflow.set_alias(model, "candidate", version)
    apply_object(kube_api, namespace, inference_deployment(name, model, replicas=None, **spec))
    wait_status(
        kube_api,
        namespace,
        "InferenceDeployment",
        name,
        lambda o: (o.get("status") or {}).get("phase") == "Promoted",
        180,
        "serving",
    )


class Scaling:
    """Reads the stable track's replicas and what its HPA currently measures."""

    def __init__(self, kube_api, namespace: str, name: str) -> None:
        self.apps = client.AppsV1Api(kube_api)
        self.hpas = client.AutoscalingV2Api(kube_api)
        self.namespace, self.name = namespace, name

    def replicas(self) -> int:
        return self.apps.read_namespaced_deployment(f"{self.name}-stable", self.namespace).spec.replicas

    def ready(self) -> int:
        return self.apps.read_namespaced_deployment(f"{self.name}-stable", self.namespace).status.ready_replicas or 0

    def current(self) -> str | None:
        """The HPA's current value of its one metric, or None while it cannot read it."""
        status = self.hpas.read_namespaced_horizontal_pod_autoscaler(self.name, self.namespace).status
        for m in status.current_metrics or []:
            if m.resource and m.resource.current.average_utilization is not None:
                return f"{m.resource.current.average_utilization}%"
            if m.pods and m.pods.current.average_value is not None:
                return str(m.pods.current.average_value)
        return None

    def cycle(self, load: LoadDriver) -> tuple[float, float, str | None, dict[int, int]]:
        """Under ``load``: wait for 4 replicas (all ready); then stop it and wait for 2.
        Returns (seconds to scale up, seconds to scale down, the metric at the peak, responses)."""
        wait_for(lambda: self.current() is not None, 90, "the HPA to read its metric")
        assert self.replicas() == 2
        with load:
            loaded = time.monotonic()
            wait_for(lambda: self.replicas() == 4, 240, "4 replicas under load", interval=2)
            up = time.monotonic() - loaded
            peak = self.current()
            wait_for(lambda: self.ready() == 4, 120, "4 ready replicas", interval=2)
            stats = load.stats()
        stopped = time.monotonic()
        wait_for(lambda: self.replicas() == 2, 240, "back to 2 replicas once load stopped", interval=2)
        return up, time.monotonic() - stopped, peak, dict(stats.by_code)


def test_cpu_target_scales_the_stable_track_to_max_under_load_and_back(kube_api, namespace, operator, cluster, trained):
    operator()
    autoscaling = {"minReplicas": 2, "maxReplicas": 4, "metrics": [{"type": "Cpu", "targetAverageUtilization": 50}]}
    # A small request, so that real inference load is a large share of it.
    spec = {"resources": {"cpu": "20m"}, "autoscaling": autoscaling}
    serve(kube_api, namespace, cluster, trained, "cpu-scaler", spec, {})
    scaling = Scaling(kube_api, namespace, "cpu-scaler")
    load = LoadDriver.for_service(kube_api, namespace, "cpu-scaler", rate=60, max_duration=400)
    up, down, peak, responses = scaling.cycle(load)
    assert responses.get(200, 0) > 0
    report(
        f"\nHPA on CPU (target 50% of 20m): 2 -> 4 replicas {up:.0f}s after load began (60 req/s, "
        f"utilization {peak}), 4 -> 2 {down:.0f}s after it stopped (stabilization window 30s); responses {responses}"
    )


def test_pods_metric_in_flight_requests_scales_the_stable_track_and_back(
    kube_api, namespace, operator, cluster, trained
):
    operator()
    metric = {"type": "Pods", "name": "slipway_requests_in_flight", "targetAverageValue": "1"}
    autoscaling = {"minReplicas": 2, "maxReplicas": 4, "metrics": [metric]}
    # Each request takes 0.4 s: at 20 requests/s about 8 are in flight, 4 per pod of 2.
    slow = {"slipway.dev/fault-latencySeconds": "0.4"}
    serve(kube_api, namespace, cluster, trained, "inflight", {"autoscaling": autoscaling}, slow)
    scaling = Scaling(kube_api, namespace, "inflight")
    load = LoadDriver.for_service(kube_api, namespace, "inflight", rate=20, concurrency=16, max_duration=400)
    up, down, peak, responses = scaling.cycle(load)
    assert responses.get(200, 0) > 0
    report(
        f"\nHPA on the Pods metric slipway_requests_in_flight (target 1 per pod, custom.metrics.k8s.io from "
        f"Prometheus): 2 -> 4 replicas {up:.0f}s after load began (20 req/s of 0.4 s, {peak} per pod), "
        f"4 -> 2 {down:.0f}s after it stopped; responses {responses}"
    )
