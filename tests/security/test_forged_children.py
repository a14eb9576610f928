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
from slipway_testing import assert_writes_only_in, read_or_none, wait_status

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

    wait_for(rolling_to_v2, 30, "the stable rolling to v2 (what it served before kept in its annotation)")
    # The roll to v2 crash-loops and will be reverted: the tenant forges what the revert reads.
    forged_text = json.dumps(forged_job("kube-system"))
    forged = {"metadata": {"annotations": {build.PREVIOUS_ANNOTATION: forged_text}}}
    forged_at = datetime.now(UTC)
    client.AppsV1Api(tenant.api).patch_namespaced_deployment("digits-stable", namespace, forged)
    still_forged: list[bool] = []  # at each look until the revert is on record

    def reverted(obj: dict) -> bool:
        annotations = apps.read_namespaced_deployment("digits-stable", namespace).metadata.annotations or {}
        still_forged.append(annotations.get(build.PREVIOUS_ANNOTATION) == forged_text)
        return (obj["status"].get("lastRollback") or {}).get("reason") == "PromotionFailed"

    idep = wait_status(kube_api, namespace, "InferenceDeployment", "digits", reverted, 120,
                       "the promotion reverted")  # fmt: skip
    # The revert was decided while the forged annotation stood: it is what the revert read.
    assert len(still_forged) > 1 and all(still_forged[:-1])
    assert idep["status"]["lastRollback"]["modelVersion"] == v2

    # The decision is on record first; the revert follows it, as the operator's own Deployment
    # around the forged pod template, which the API server refuses (restartPolicy Never is a Job's):
    # the tenant can spoil its own revert, nothing more.
    def revert_attempted() -> bool:
        return any(r.verb == "update" and r.resource == "deployments" and r.name == "digits-stable" and r.code == 422
                   for r in requests_by(cluster, OPERATOR, forged_at))  # fmt: skip

    wait_for(revert_attempted, 30, "the operator's revert of digits-stable from the forged template")
    batch = client.BatchV1Api(kube_api)
    assert read_or_none(batch.read_namespaced_job, "pwn", "kube-system") is None
    writes = assert_writes_only_in(cluster, OPERATOR, since, namespace)
    kinds = {r.resource for r in writes}
    assert kinds <= {"deployments", "services", "horizontalpodautoscalers", "inferencedeployments", "events"}, kinds
    stable = apps.read_namespaced_deployment("digits-stable", namespace)
    assert stable.spec.selector.match_labels == build.selector("digits", "stable")
