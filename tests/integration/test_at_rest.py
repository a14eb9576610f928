"""At rest, the operator costs nothing: one object of each kind settled, then a minute (two alias
polls) in which it makes no request to the API server (its own identity, counted from the API server's audit log),
none to Prometheus, and to MLflow only the alias poll of the deployment that follows an alias."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from localkube.audit import audited_kubeconfig, requests_by, summarize
from localkube.wait import wait_for
from slipway import metrics
from slipway_testing import apply_object, condition, get_object, inference_deployment, report

pytestmark = pytest.mark.cluster

USER = "slipway-operator-at-rest"
WINDOW_SECONDS = float(os.environ.get("SLIPWAY_AT_REST_SECONDS", "60"))
ALIAS_POLL_SECONDS = 30.0


def deployment(name: str, model: dict[str, Any], **spec: Any) -> dict[str, Any]:
    inflight = [{"type": "Pods", "name": "inflight", "targetAverageValue": "0.5"}]
    scaling = {"minReplicas": 1, "maxReplicas": 2, "metrics": inflight}
    return inference_deployment(name, model, **{"autoscaling": scaling, **spec})


def external_requests(service: str) -> float:
    return sum(
        metrics.EXTERNAL_REQUESTS.labels(service, outcome)._value.get()  # type: ignore[attr-defined]
        for outcome in ("ok", "error")
    )


def ready(kube_api, namespace: str, kind: str, name: str) -> bool:
    obj = get_object(kube_api, namespace, kind, name)
    meta_generation = obj["metadata"].get("generation")
    return (
        condition(obj, "Ready").get("status") == "True"
        and (obj.get("status") or {}).get("observedGeneration") == meta_generation
    )


# On a quiet cluster: a CustomResourceDefinition that another test makes or deletes has the operator
# (kopf) learn the API groups anew, 11 discovery GETs in one CI run. That is a change, not rest.
@pytest.mark.serial
def test_settled_objects_cost_no_requests(kube_api, namespace, operator, cluster, monkeypatch):
    from localkube.bootstrap import apply_gateway_api_crds
    from localkube.kube import Kube

    apply_gateway_api_crds(Kube(cluster.kubeconfig))
    monkeypatch.setenv("SLIPWAY_ALIAS_POLL_SECONDS", str(ALIAS_POLL_SECONDS))
    operator(kubeconfig=audited_kubeconfig(cluster, USER))
    model = f"digits-{namespace}"
    apply_object(kube_api, namespace, {
        "apiVersion": "slipway.dev/v1alpha1",
        "kind": "TrainingRun",
        "metadata": {"name": "digits"},
        "spec": {
            "model": {"name": model},
            "image": "ghcr.io/slipway-dev/slipway:0.1.0",
            "command": ["python", "-m", "slipway.workloads.train"],
            "args": ["--steps", "4"],
            "artifact": {"quantization": {"method": "none"},
                         "validation": {"gates": [{"metric": "accuracy", "min": 0.5}]}, "aliases": ["candidate"]},
        },
    })  # fmt: skip
    wait_for(lambda: ready(kube_api, namespace, "ModelArtifact", "digits"), 300, "the ModelArtifact Validated")
    apply_object(kube_api, namespace, deployment("by-ref", {"artifactRef": {"name": "digits"}}))
    gateway = {"mode": "GatewayAPI", "parentRefs": [{"name": "web"}]}
    apply_object(kube_api, namespace, deployment("by-ref-gw", {"artifactRef": {"name": "digits"}}, traffic=gateway))
    apply_object(kube_api, namespace, deployment("by-alias", {"name": model, "alias": "candidate"}))
    objects = [("TrainingRun", "digits"), ("ModelArtifact", "digits")]
    objects += [("InferenceDeployment", n) for n in ("by-ref", "by-ref-gw", "by-alias")]
    wait_for(lambda: all(ready(kube_api, namespace, k, n) for k, n in objects), 300, "every object Ready")

    # Settled: the last passes (woken by pods turning ready) finish within seconds.
    def quiet() -> bool:
        now = datetime.now(UTC)
        return not [r for r in requests_by(cluster, USER, now - timedelta(seconds=10)) if r.verb != "watch"]

    wait_for(quiet, 120, "10 s without a request from the operator", interval=2)
    mlflow_before, prometheus_before = external_requests("mlflow"), external_requests("prometheus")
    start = datetime.now(UTC)
    end = start + timedelta(seconds=WINDOW_SECONDS)
    wait_for(lambda: datetime.now(UTC) >= end, WINDOW_SECONDS + 10, "the measurement window", interval=1)
    records = requests_by(cluster, USER, start, end)
    mlflow_calls = external_requests("mlflow") - mlflow_before
    prometheus_calls = external_requests("prometheus") - prometheus_before
    minutes = WINDOW_SECONDS / 60
    report(
        f"at rest, {len(objects)} objects, {WINDOW_SECONDS:.0f} s: API requests {summarize(records)}; "
        f"MLflow {mlflow_calls:.0f} ({mlflow_calls / minutes:.1f}/min: alias poll), Prometheus {prometheus_calls:.0f}"
    )
    assert [r for r in records if r.verb != "watch"] == [], summarize(records)
    assert prometheus_calls == 0
    # Only the alias poll: one lookup per poll interval, for the one deployment that follows an alias.
    assert mlflow_calls <= WINDOW_SECONDS / ALIAS_POLL_SECONDS + 1
    assert mlflow_calls >= 1, "the alias poll did not run"
