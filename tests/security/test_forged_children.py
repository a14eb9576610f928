"""A child's annotations and labels are writable by the namespace editor, so the operator never
reads a child back from them: the revert of a failed promotion is rebuilt from status, which only
the operator writes, and every write stays among the parent's own children."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from kubernetes import client

from localkube.audit import audited_kubeconfig
from localkube.wait import wait_for
from slipway.inference import build
from slipway_testing import (
    Versions,
    assert_writes_only_in,
    deployment,
    get_object,
    patch_spec,
    read_or_none,
    serving,
    wait_phase,
    wait_status,
)

pytestmark = pytest.mark.cluster

OPERATOR = "slipway-security-operator"


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

    wait_for(rolling_to_v2, 30, "the stable rolling to v2 (what it served before kept in status)")
    kept = get_object(kube_api, namespace, "InferenceDeployment", "digits")["status"]["previousStable"]
    assert kept["modelVersion"] == v1 and kept["podTemplate"]["spec"]["containers"]
    # The roll to v2 crash-loops and will be reverted: the tenant forges what an earlier Slipway read
    # back for a revert (a manifest in the stable's annotation) and the stable's own labels.
    forged_text = json.dumps(forged_job("kube-system"))
    forged = {"metadata": {"annotations": {"slipway.dev/previous-manifest": forged_text},
                           "labels": {"slipway.dev/revision": "forged"}}}  # fmt: skip
    client.AppsV1Api(tenant.api).patch_namespaced_deployment("digits-stable", namespace, forged)
    idep = wait_status(kube_api, namespace, "InferenceDeployment", "digits",
                       lambda o: (o["status"].get("lastRollback") or {}).get("reason") == "PromotionFailed", 120,
                       "the promotion reverted")  # fmt: skip
    assert idep["status"]["lastRollback"]["modelVersion"] == v2

    # The revert is the operator's own Deployment around the pod template status kept: the stable
    # serves v1 again, and nothing the tenant wrote was used.
    def back_on_v1() -> bool:
        stable = apps.read_namespaced_deployment("digits-stable", namespace)
        labels = stable.spec.template.metadata.labels
        return labels.get("slipway.dev/model-version") == v1 and (stable.status.ready_replicas or 0) >= 1

    wait_for(back_on_v1, 90, "the stable back on v1, from the template status kept")
    stable = apps.read_namespaced_deployment("digits-stable", namespace)
    assert stable.spec.selector.match_labels == build.selector("digits", "stable")
    assert [c.image for c in stable.spec.template.spec.containers] != ["busybox"]
    batch = client.BatchV1Api(kube_api)
    assert read_or_none(batch.read_namespaced_job, "pwn", "kube-system") is None
    writes = assert_writes_only_in(cluster, OPERATOR, since, namespace)
    kinds = {r.resource for r in writes}
    assert kinds <= {"deployments", "services", "horizontalpodautoscalers", "inferencedeployments", "events"}, kinds
