"""The shared Prometheus answers only for the tenant's own namespace: a metric's query that names
another namespace is never sent (the analysis holds, Inconclusive, naming the field), and an
analysis interval that would hammer Prometheus is refused at admission."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from integration.test_inferencedeployment import Versions, deployment, serving
from slipway_e2e.lifecycle import condition
from slipway_testing import get_object, wait_status

pytestmark = pytest.mark.cluster


def create_as(tenant, namespace: str, body: dict) -> dict:
    return client.CustomObjectsApi(tenant.api).create_namespaced_custom_object(  # type: ignore[no-any-return]
        "slipway.dev", "v1alpha1", namespace, "inferencedeployments", body
    )


def test_a_query_naming_another_namespace_is_never_run(kube_api, namespace, operator, mlflow, trained, tenant):
    operator()
    versions = Versions(mlflow, f"digits-{namespace}", trained)
    v1 = versions.publish()
    body = deployment(versions.model)
    spy = 'sum(rate(slipway_requests_total{namespace="kube-system"}[1m]))'
    body["spec"]["rollout"]["analysis"]["metrics"] = [{"name": "spy", "max": 1e9, "query": spy}]
    create_as(tenant, namespace, body)
    serving(kube_api, namespace, v1)
    versions.publish()
    idep = wait_status(kube_api, namespace, "InferenceDeployment", "digits",
                       lambda o: condition(o, "Ready").get("reason") == "AnalysisInconclusive", 120,
                       "the canary held for an unusable query")  # fmt: skip
    [result] = idep["status"]["analysis"]
    assert result["result"] == "Inconclusive" and result.get("value") is None
    assert 'namespace="kube-system"' in result["message"]
    assert "spec.rollout.analysis.metrics[].query" in result["message"]
    assert idep["status"]["phase"] != "Promoted"
    assert get_object(kube_api, namespace, "InferenceDeployment", "digits")["status"]["stable"]["modelVersion"] == v1


def test_an_analysis_every_millisecond_is_refused_at_admission(kube_api, namespace, tenant):
    body = deployment("digits")
    body["spec"]["rollout"]["analysis"]["interval"] = "1ms"
    with pytest.raises(ApiException) as refused:
        create_as(tenant, namespace, body)
    assert refused.value.status == 422
    assert "spec.rollout.analysis.interval" in refused.value.body and "at least 5s" in refused.value.body
