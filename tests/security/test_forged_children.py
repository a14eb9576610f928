"""A child's annotations are writable by the namespace editor: what the operator reads back from
them never decides the kind, namespace or name of what it writes."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from kubernetes import client

from integration.test_inferencedeployment import Versions, deployment, patch_spec, serving, wait_phase
from localkube.audit import audited_kubeconfig, requests_by
from localkube.wait import wait_for
from slipway.builders import inferencedeployment as build
from slipway_testing import read_or_none, wait_status

pytestmark = pytest.mark.cluster

OPERATOR = "slipway-security-operator"
WRITES = ("create", "update", "patch", "delete", "deletecollection")


def forged_job(namespace: str) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "pwn", "namespace": namespace},
        "spec": {"template": {"metadata": {"labels": {"forged": "true"}},
                              "spec": {"restartPolicy": "Never",
                                       "containers": [{"name": "pwn", "image": "busybox",
                                                       "command": ["python", "-c", "print('pwn')"]}]}}},
    }  # fmt: skip


def test_a_forged_previous_manifest_never_writes_outside_the_namespace(
    cluster, kube_api, namespace, operator, mlflow, trained, tenant
):
    since = datetime.now(UTC)
    operator(kubeconfig=audited_kubeconfig(cluster, OPERATOR))
    versions = Versions(mlflow, f"digits-{namespace}", trained)
    v1 = versions.publish()
    # The tenant applies its own InferenceDeployment (its edit rights cover Slipway's kinds).
    client.CustomObjectsApi(tenant.api).create_namespaced_custom_object(
        "slipway.dev", "v1alpha1", namespace, "inferencedeployments",
        deployment(versions.model, progressDeadlineSeconds=20),
    )  # fmt: skip
    serving(kube_api, namespace, v1)
    v2 = versions.publish(crashOnStart="true")
    wait_status(kube_api, namespace, "InferenceDeployment", "digits",
                lambda o: (o["status"].get("canary") or {}).get("modelVersion") == v2, 60,
                "the canary of v2")  # fmt: skip
    patch_spec(tenant.api, namespace, {}, {"slipway.dev/promote": "true"})
    wait_phase(kube_api, namespace, ["Promoting"], 30, "promoting")
    apps = client.AppsV1Api(kube_api)

    def rolling_to_v2() -> bool:
        labels = apps.read_namespaced_deployment("digits-stable", namespace).spec.template.metadata.labels
        return labels.get("slipway.dev/model-version") == v2

    wait_for(rolling_to_v2, 30, "the stable rolling to v2 (what it served before kept in its annotation)")
    # The roll to v2 crash-loops and will be reverted: the tenant forges what the revert reads.
    forged = {"metadata": {"annotations": {"slipway.dev/previous-manifest": json.dumps(forged_job("kube-system"))}}}
    client.AppsV1Api(tenant.api).patch_namespaced_deployment("digits-stable", namespace, forged)
    idep = wait_status(kube_api, namespace, "InferenceDeployment", "digits",
                       lambda o: (o["status"].get("lastRollback") or {}).get("reason") == "PromotionFailed", 120,
                       "the promotion reverted")  # fmt: skip
    assert idep["status"]["lastRollback"]["modelVersion"] == v2
    batch = client.BatchV1Api(kube_api)
    assert read_or_none(batch.read_namespaced_job, "pwn", "kube-system") is None
    writes = [r for r in requests_by(cluster, OPERATOR, since) if r.verb in WRITES]
    outside = [(r.verb, r.resource, r.namespace, r.name) for r in writes if r.namespace != namespace]
    assert writes and outside == []
    kinds = {r.resource for r in writes}
    assert kinds <= {"deployments", "services", "horizontalpodautoscalers", "inferencedeployments", "events"}, kinds
    # The revert is the operator's own Deployment (name, selector) around the forged pod template:
    # what the tenant could have written on the Deployment directly.
    stable = apps.read_namespaced_deployment("digits-stable", namespace)
    assert stable.spec.selector.match_labels == build.selector("digits", "stable")
    assert stable.spec.template.spec.containers[0].name == "pwn"
