"""Files re-uploaded to MLflow after validation are never served: the operator digests every file
of a ModelArtifact's version when it registers it and keeps that digest in the artifact's status
(Kubernetes, not MLflow); the serving pods' fetch-model container gets it through the pod spec and
checks every file against it. Someone with write access to the run replaces the model file after
the artifact is Validated: no pod of the deployment becomes Ready, fetch-model exits 2, and the
deployment's condition says why. The files put back as they were validated, a new pod serves."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from kubernetes import client

from localkube.wait import wait_for
from slipway.mlflow import MlflowClient
from slipway.mlflow.digests import FILES_DIGEST_ENV
from slipway_testing import (
    condition,
    create_as,
    inference_deployment,
    model_artifact,
    phase_in,
    pods_of,
    report,
    wait_status,
)

pytestmark = pytest.mark.cluster


def sha256sum(directory: Path) -> str:
    shell = "find . -type f | cut -c3- | LC_ALL=C sort | xargs sha256sum | sha256sum"
    return "sha256:" + subprocess.run(["sh", "-c", shell], cwd=directory, capture_output=True, text=True,
                                      check=True).stdout.split()[0]  # fmt: skip


def ready_pods(kube_api, namespace: str) -> int:
    return sum(
        1
        for pod in pods_of(kube_api, namespace, "stable")
        if any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
    )


def test_files_changed_in_mlflow_after_validation_are_never_served(
    kube_api, namespace, operator, mlflow: MlflowClient, trained, tenant, tmp_path
):
    # The team's own run, holding a copy of the trained model (the shared run stays untouched).
    files = Path(mlflow.download_artifacts(f"runs:/{trained}/model", tmp_path / "trained"))
    run = mlflow.create_run(mlflow.get_or_create_experiment(f"fetch-digest-{namespace}"), "fetch-digest")
    mlflow.upload_dir(run.run_id, files, "model")
    validated_as = sha256sum(files)
    operator()
    model = f"digest-{namespace}"
    source = {"mlflowRun": {"runId": run.run_id, "artifactPath": "model"}}
    create_as(tenant, namespace, model_artifact("digits", model, source, quantization={"method": "none"}))
    artifact = wait_status(kube_api, namespace, "ModelArtifact", "digits", phase_in("Validated", "Failed"), 120,
                           "the artifact validated")  # fmt: skip
    assert artifact["status"]["phase"] == "Validated", artifact["status"]
    assert artifact["status"]["filesDigest"] == validated_as  # every file, as sha256sum digests them

    # After validation, the model file is replaced in MLflow (write access to the run is enough).
    original = (files / "model.onnx").read_bytes()
    tampered = tmp_path / "tampered"
    shutil.copytree(files, tampered)
    (tampered / "model.onnx").write_bytes(original[:-16] + b"\x00" * 16)
    mlflow.upload_artifact(run.run_id, tampered / "model.onnx", "model")
    create_as(tenant, namespace, inference_deployment("served", {"artifactRef": {"name": "digits"}}, modelLoad={}))

    def refused(obj) -> bool:
        return "digest mismatch" in condition(obj, "Reconciling").get("message", "")

    idep = wait_status(kube_api, namespace, "InferenceDeployment", "served", refused, 150,
                       "the condition naming the digest mismatch")  # fmt: skip
    message = condition(idep, "Reconciling")["message"]
    assert "0/1 replicas ready" in message and "init container fetch-model" in message, message
    (pod,) = pods_of(kube_api, namespace, "stable")
    fetch_env = {e.name: e.value for e in pod.spec.init_containers[0].env}
    assert fetch_env[FILES_DIGEST_ENV] == validated_as  # from the artifact's status, through the pod spec
    (init,) = pod.status.init_container_statuses
    ended = init.last_state.terminated or init.state.terminated
    assert ended is not None and ended.exit_code == 2, init
    assert ready_pods(kube_api, namespace) == 0 and condition(idep, "Ready")["status"] == "False"
    refused_ready = ready_pods(kube_api, namespace)

    # The guard is what refused: the validated bytes put back, a new pod fetches them and serves.
    mlflow.upload_artifact(run.run_id, files / "model.onnx", "model")
    client.CoreV1Api(kube_api).delete_namespaced_pod(pod.metadata.name, namespace)  # no crash-loop back-off
    wait_for(lambda: ready_pods(kube_api, namespace) == 1, 150, "a pod serving the validated files")
    report(f"\nfiles changed after validation: {refused_ready} of 1 pods Ready, fetch-model exit {ended.exit_code}, "
           f"condition Reconciling: {message}; put back: 1 of 1 Ready")  # fmt: skip
