"""What Slipway's children are and carry, on the local cluster: an object that already holds a
child's name is never adopted or overwritten (Stalled/OwnedByOther); children carry only
Slipway's labels, never the parent's (GitOps tools track by such labels); an MLflow URL with
credentials never shows in status, Events, log lines or pods, which read credentials from a Secret."""

from __future__ import annotations

import json
import logging

import pytest
from kubernetes import client

from slipway_testing import apply_object, condition, events_for, get_object, training_run, wait_status

pytestmark = pytest.mark.cluster


def job(name: str, labels: dict[str, str]) -> client.V1Job:
    container = client.V1Container(name="other", image="busybox", command=["true"])
    template = client.V1PodTemplateSpec(spec=client.V1PodSpec(containers=[container], restart_policy="Never"))
    return client.V1Job(metadata=client.V1ObjectMeta(name=name, labels=labels),
                        spec=client.V1JobSpec(template=template, suspend=True))  # fmt: skip


def test_a_job_of_someone_else_with_the_childs_name_is_refused_not_adopted(kube_api, namespace, operator):
    batch = client.BatchV1Api(kube_api)
    theirs = batch.create_namespaced_job(namespace, job("taken-train", {"team": "b"}))
    operator()
    apply_object(kube_api, namespace, training_run("taken"))
    refused = lambda o: condition(o, "Stalled").get("reason") == "OwnedByOther"  # noqa: E731
    run = wait_status(kube_api, namespace, "TrainingRun", "taken", refused, 60, "Stalled: OwnedByOther")
    stalled = condition(run, "Stalled")
    assert stalled["status"] == "True" and "taken-train" in stalled["message"]
    after = batch.read_namespaced_job("taken-train", namespace)
    assert after.metadata.uid == theirs.metadata.uid
    # Untouched by Slipway (the Job controller may still write its status): no owner, labels,
    # annotations or containers of Slipway's.
    assert not after.metadata.owner_references
    assert after.metadata.labels == {"team": "b"}
    assert not [k for k in after.metadata.annotations or {} if k.startswith("slipway.dev/")]
    assert [c.name for c in after.spec.template.spec.containers] == ["other"]
    assert any(reason == "OwnedByOther" for reason, _ in events_for(kube_api, namespace, "taken"))


def test_children_carry_only_slipways_labels(kube_api, namespace, operator):
    operator()
    body = training_run("labelled", checkpoint={"size": "1Gi"}, artifact={"quantization": {"method": "none"}})
    body["metadata"]["labels"] = {"app.kubernetes.io/instance": "argocd-app", "team": "a"}
    apply_object(kube_api, namespace, body)
    wait_status(kube_api, namespace, "TrainingRun", "labelled",
                lambda o: o.get("status", {}).get("phase") == "Succeeded", 180, "Succeeded")  # fmt: skip
    core, batch = client.CoreV1Api(kube_api), client.BatchV1Api(kube_api)
    children = {
        "Job": batch.read_namespaced_job("labelled-train", namespace),
        "PVC": core.read_namespaced_persistent_volume_claim("labelled-checkpoints", namespace),
        "ModelArtifact": get_object(kube_api, namespace, "ModelArtifact", "labelled"),
    }
    for kind, child in children.items():
        labels = (child["metadata"] if isinstance(child, dict) else child.metadata.to_dict()).get("labels") or {}
        assert "app.kubernetes.io/instance" not in labels and "team" not in labels, f"{kind}: {labels}"
        assert labels.get("app.kubernetes.io/managed-by") == "slipway", f"{kind}: {labels}"


def test_mlflow_credentials_in_the_operators_url_reach_no_status_event_log_or_pod(
    kube_api, namespace, operator, cluster, caplog
):
    caplog.set_level(logging.DEBUG)  # every record of the operator (in-process) and its HTTP clients
    secret = "s3cret-pass"
    url = cluster.mlflow_url.replace("http://", f"http://slipway:{secret}@")  # MLflow without auth ignores it
    client.CoreV1Api(kube_api).create_namespaced_secret(namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name="slipway-mlflow-credentials"),
        string_data={"MLFLOW_TRACKING_USERNAME": "slipway", "MLFLOW_TRACKING_PASSWORD": secret}))  # fmt: skip
    operator(mlflow_url=url)
    apply_object(kube_api, namespace, training_run("creds", artifact={"quantization": {"method": "int8-dynamic"}}))
    run = wait_status(kube_api, namespace, "TrainingRun", "creds",
                      lambda o: o.get("status", {}).get("phase") == "Succeeded", 180, "Succeeded")  # fmt: skip
    wait_status(kube_api, namespace, "ModelArtifact", "creds",
                lambda o: condition(o, "Ready").get("status") == "True", 180, "validated")  # fmt: skip
    seen = {
        "status": json.dumps([run["status"], get_object(kube_api, namespace, "ModelArtifact", "creds")["status"]]),
        "events": json.dumps(events_for(kube_api, namespace, "creds")),
    }
    jobs = client.BatchV1Api(kube_api).list_namespaced_job(namespace).items
    assert {"creds-train", "creds-quantize"} <= {j.metadata.name for j in jobs}
    for job in jobs:
        [container] = client.ApiClient().sanitize_for_serialization(job.spec.template.spec.containers)
        seen[job.metadata.name] = json.dumps(container)
        assert {"secretRef": {"name": "slipway-mlflow-credentials", "optional": True}} in container["envFrom"]
    seen["log"] = caplog.text
    assert "://***@" in caplog.text  # the HTTP clients' request lines were logged, redacted
    leaked = [where for where, text in seen.items() if secret in text]
    assert leaked == [], f"the MLflow password shows in {leaked}"
