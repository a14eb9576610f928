"""The shared Prometheus answers only for the tenant's own namespace: a metric's query that names
another namespace is never sent (the analysis holds, Inconclusive, naming the field), and an
analysis interval that would hammer Prometheus is refused at admission."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from slipway_testing import (
    Versions,
    condition,
    deployment,
    get_object,
    promql_escapes,
    promql_parse,
    report,
    serving,
    wait_status,
)

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


def test_a_comment_ended_by_cr_or_a_keyword_as_a_metric_name_reads_only_the_namespace(
    kube_api, namespace, operator, mlflow, trained, tenant
):
    """Issue 44's numeric oracle: dry-run metrics (their value shown in status.analysis, never deciding)
    whose query hides a selector from Slipway. Prometheus ends a comment at "\r" too, so the second
    selector of the first was sent unconfined; the second reads metrics named like PromQL keywords."""
    operator()
    versions = Versions(mlflow, f"digits-{namespace}", trained)
    v1 = versions.publish()
    hidden = 'sum(slipway_requests_total) #\r+ count({__name__=~".+", namespace!="{{ namespace }}"})'
    keywords = "sum(or) + sum(by) + sum(offset) + sum(sum) + sum(:) + count(and offset 1m)"
    metrics = ({"name": "hidden", "max": 1e9, "dryRun": True, "query": hidden},
               {"name": "keywords", "max": 1e9, "dryRun": True, "query": keywords})  # fmt: skip
    create_as(tenant, namespace, deployment(versions.model, metrics=metrics))
    serving(kube_api, namespace, v1)
    versions.publish()
    shown: dict[str, dict] = {}

    def both_shown(o: dict) -> bool:
        shown.update((r["metric"], r) for r in (o.get("status") or {}).get("analysis") or [])
        return {"hidden", "keywords"} <= shown.keys()

    wait_status(kube_api, namespace, "InferenceDeployment", "digits", both_shown, 120,
                "both dry-run metrics shown in status.analysis")  # fmt: skip
    refused = shown["hidden"]
    assert refused["result"] == "Inconclusive" and refused.get("value") is None and refused["dryRun"] is True
    assert "control character '\\r'" in refused["message"], refused["message"]
    assert "spec.rollout.analysis.metrics[].query" in refused["message"]
    # What was sent, read by Prometheus' own parser: every selector in the namespace (0 unconfined).
    sent = shown["keywords"]["query"]
    [answer] = promql_parse([sent])
    read = [len(reading.get("selectors") or []) for reading in answer.values()]
    report(f"\nqueries: the '\\r' query {refused['result']}, value {refused.get('value')}; the keywords query as "
           f"sent, read by Prometheus' parser ({', '.join(answer)}): selectors {read}, "
           f"unconfined {len(promql_escapes(answer, namespace))}")  # fmt: skip
    assert "error" not in answer["default"], answer
    names = {m["value"] for selector in answer["default"]["selectors"] for m in selector if m["name"] == "__name__"}
    assert names == {"or", "by", "offset", "sum", ":", "and"}, sent
    assert promql_escapes(answer, namespace) == [], sent


def test_an_analysis_every_millisecond_is_refused_at_admission(kube_api, namespace, tenant):
    body = deployment("digits")
    body["spec"]["rollout"]["analysis"]["interval"] = "1ms"
    with pytest.raises(ApiException) as refused:
        create_as(tenant, namespace, body)
    assert refused.value.status == 422
    assert "spec.rollout.analysis.interval" in refused.value.body and "at least 5s" in refused.value.body
