"""The admin's knobs of a shared cluster, on the Namespace: which PriorityClasses and RuntimeClasses a
namespace's pods may use and which Gateways of other namespaces its routes may attach to. A namespace editor who
names anything else gets a Stalled condition naming the field, and no child is written."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from kubernetes import client

from localkube.audit import audited_kubeconfig
from slipway_testing import Versions, assert_writes_only_in, condition, deployment, serving, wait_status

pytestmark = pytest.mark.cluster

GROUP, VERSION = "slipway.dev", "v1alpha1"


def create_as(tenant, namespace: str, body: dict) -> None:
    client.CustomObjectsApi(tenant.api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, "inferencedeployments", body
    )


def refused(kube_api, namespace: str, name: str, reason: str) -> str:
    obj = wait_status(kube_api, namespace, "InferenceDeployment", name,
                      lambda o: condition(o, "Stalled").get("reason") == reason, 60, f"{name}: {reason}")  # fmt: skip
    return str(condition(obj, "Stalled")["message"])


def test_priority_classes_and_gateways_are_the_admins_to_allow(
    cluster, kube_api, namespace, operator, mlflow, trained, tenant
):
    annotations = {"slipway.dev/allowed-priority-classes": "team-*"}
    core = client.CoreV1Api(kube_api)
    core.patch_namespace(namespace, {"metadata": {"annotations": annotations}})
    since = datetime.now(UTC)
    operator(kubeconfig=audited_kubeconfig(cluster, "slipway-knobs-operator"))
    versions = Versions(mlflow, f"digits-{namespace}", trained)
    v1 = versions.publish()

    # The tenant asks for a class that may preempt anything on the node.
    critical = deployment(versions.model)
    critical["metadata"]["name"] = "critical"
    critical["spec"]["podTemplate"] = {"priorityClassName": "system-node-critical"}
    create_as(tenant, namespace, critical)
    message = refused(kube_api, namespace, "critical", "PriorityClassNotAllowed")
    assert message.startswith("spec.podTemplate.priorityClassName: PriorityClass 'system-node-critical'")

    # The tenant's route names another namespace's Gateway.
    foreign = deployment(versions.model)
    foreign["metadata"]["name"] = "foreign"
    foreign["spec"]["traffic"] = {"mode": "GatewayAPI", "parentRefs": [{"name": "public", "namespace": "kube-system"}]}
    create_as(tenant, namespace, foreign)
    message = refused(kube_api, namespace, "foreign", "GatewayNotAllowed")
    assert message.startswith("spec.traffic.parentRefs[0]: Gateway kube-system/public is in another namespace")

    apps = client.AppsV1Api(kube_api)
    names = {d.metadata.name for d in apps.list_namespaced_deployment(namespace).items}
    assert not names & {"critical-stable", "critical-canary", "foreign-stable", "foreign-canary"}
    routes = client.CustomObjectsApi(kube_api).list_namespaced_custom_object(
        "gateway.networking.k8s.io", "v1", namespace, "httproutes"
    )
    assert routes["items"] == []

    # Without a class of its own, a serving pod does not get the preempting default the namespace
    # may not use: it runs at the cluster's default priority.
    create_as(tenant, namespace, deployment(versions.model))
    serving(kube_api, namespace, v1)
    stable = apps.read_namespaced_deployment("digits-stable", namespace)
    assert stable.spec.template.spec.priority_class_name is None
    # Nothing written outside the namespace, by the operator, throughout.
    assert_writes_only_in(cluster, "slipway-knobs-operator", since, namespace)


def test_in_multi_tenant_mode_a_namespace_the_admin_set_nothing_for_gets_no_other_class_and_no_hostname(
    cluster, kube_api, namespace, operator, mlflow, tenant, monkeypatch
):
    """--require-model-allowlist, the namespace allowed its model and nothing else: a class other than
    the operator's default (one that may preempt anything) and a hostname (another team's, or any)
    are refused, naming the field and the annotation; no Deployment or HTTPRoute is written."""
    model = f"digits-{namespace}"
    core = client.CoreV1Api(kube_api)
    core.patch_namespace(namespace, {"metadata": {"annotations": {"slipway.dev/allowed-models": model}}})
    monkeypatch.setenv("SLIPWAY_REQUIRE_MODEL_ALLOWLIST", "true")
    since = datetime.now(UTC)
    operator(kubeconfig=audited_kubeconfig(cluster, "slipway-shared-operator"))

    high = deployment(model)
    high["metadata"]["name"] = "high"
    high["spec"]["podTemplate"] = {"priorityClassName": "system-cluster-critical"}
    create_as(tenant, namespace, high)
    message = refused(kube_api, namespace, "high", "PriorityClassNotAllowed")
    assert message.startswith("spec.podTemplate.priorityClassName: PriorityClass 'system-cluster-critical' is not "
                              f"allowed in namespace {namespace} (it has no slipway.dev/allowed-priority-classes "
                              "annotation and the operator runs with --require-model-allowlist: only the operator's "
                              "default, slipway-inference)"), message  # fmt: skip

    claimed = deployment(model)
    claimed["metadata"]["name"] = "claimed"
    claimed["spec"]["traffic"] = {"mode": "GatewayAPI", "parentRefs": [{"name": "web"}],
                                  "hostnames": ["api.team-b.example.com"]}  # fmt: skip
    create_as(tenant, namespace, claimed)
    message = refused(kube_api, namespace, "claimed", "HostnameNotAllowed")
    assert message.startswith("spec.traffic.hostnames[0]: hostname api.team-b.example.com is not allowed"), message

    # A runtime class decides what the pods reach of the node (a VM's isolation lifted, a device runtime).
    runtime = deployment(model)
    runtime["metadata"]["name"] = "runtime"
    runtime["spec"]["podTemplate"] = {"runtimeClassName": "unconfined"}
    create_as(tenant, namespace, runtime)
    message = refused(kube_api, namespace, "runtime", "RuntimeClassNotAllowed")
    expected = (f"spec.podTemplate.runtimeClassName: RuntimeClass 'unconfined' is not allowed in namespace "
                f"{namespace} (it has no slipway.dev/allowed-runtime-classes annotation")  # fmt: skip
    assert message.startswith(expected), message

    names = {d.metadata.name for d in client.AppsV1Api(kube_api).list_namespaced_deployment(namespace).items}
    assert not names & {
        "high-stable",
        "high-canary",
        "claimed-stable",
        "claimed-canary",
        "runtime-stable",
        "runtime-canary",
    }
    routes = client.CustomObjectsApi(kube_api).list_namespaced_custom_object(
        "gateway.networking.k8s.io", "v1", namespace, "httproutes"
    )
    assert routes["items"] == []
    assert_writes_only_in(cluster, "slipway-shared-operator", since, namespace)
