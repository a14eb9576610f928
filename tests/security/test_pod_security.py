"""Slipway's pods pass the restricted Pod Security Standard that the namespace enforces (the
operator fixture labels it); a tenant that asks for more than restricted allows gets its pods
refused by the API server, and the InferenceDeployment says why instead of waiting in silence."""

from __future__ import annotations

import pytest
from kubernetes import client

from slipway_testing import Versions, condition, deployment, serving, training_run, wait_status

pytestmark = pytest.mark.cluster


def test_slipways_pods_run_where_restricted_is_enforced_and_root_is_refused_with_the_reason(
    kube_api, namespace, operator, mlflow, trained, tenant
):
    operator()
    labels = client.CoreV1Api(kube_api).read_namespace(namespace).metadata.labels
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    versions = Versions(mlflow, f"digits-{namespace}", trained)
    v1 = versions.publish()
    client.CustomObjectsApi(tenant.api).create_namespaced_custom_object(
        "slipway.dev", "v1alpha1", namespace, "inferencedeployments", deployment(versions.model)
    )
    serving(kube_api, namespace, v1)  # its pods were admitted under restricted
    root = {"spec": {"podTemplate": {"securityContext": {"runAsUser": 0, "runAsNonRoot": False}}}}
    client.CustomObjectsApi(tenant.api).patch_namespaced_custom_object(
        "slipway.dev", "v1alpha1", namespace, "inferencedeployments", "digits", root
    )
    idep = wait_status(kube_api, namespace, "InferenceDeployment", "digits",
                       lambda o: "PodSecurity" in (condition(o, "Degraded").get("message") or "")
                       or "PodSecurity" in (condition(o, "Ready").get("message") or ""), 120,
                       "the refused pods' reason in a condition")  # fmt: skip
    said = (condition(idep, "Degraded").get("message") or "") + (condition(idep, "Ready").get("message") or "")
    assert "FailedCreate" in said and "restricted" in said
    pods = client.CoreV1Api(kube_api).list_namespaced_pod(namespace, label_selector="slipway.dev/track").items
    assert all((p.spec.security_context.run_as_user or 1) != 0 for p in pods)


def test_a_training_job_whose_pods_are_refused_is_stalled_with_the_api_servers_reason(
    kube_api, namespace, operator, tenant
):
    operator()
    privileged = {"containerSecurityContext": {"privileged": True, "allowPrivilegeEscalation": True}}
    body = training_run("root", steps=4, podTemplate=privileged)
    client.CustomObjectsApi(tenant.api).create_namespaced_custom_object(
        "slipway.dev", "v1alpha1", namespace, "trainingruns", body
    )
    run = wait_status(kube_api, namespace, "TrainingRun", "root",
                      lambda o: condition(o, "Stalled").get("reason") == "FailedCreate", 60,
                      "the refused training pods Stalled with the API server's reason")  # fmt: skip
    message = condition(run, "Stalled")["message"]
    assert "violates PodSecurity" in message and "privileged" in message and "spec.podTemplate" in message
    assert run["status"]["phase"] == "Pending"
    assert (
        client.CoreV1Api(kube_api).list_namespaced_pod(namespace, label_selector="slipway.dev/trainingrun").items == []
    )
