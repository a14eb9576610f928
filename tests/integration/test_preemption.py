"""Training and serving share GPUs, and serving wins: a TrainingRun holds all 4 GPUs of the node;
an InferenceDeployment asking for one gets it because the real scheduler preempts the training
pod (slipway-inference outranks slipway-training). The trainer checkpoints on SIGTERM and exits
143, the Job replaces the pod without counting it against maxRestarts, the new pod waits for
GPUs, and once serving gives its GPU back training resumes from the checkpoint and finishes.

The same holds when Kueue admitted the training (its quota accounts for training alone, serving
outside Kueue with the PriorityClass): Kueue keeps the run admitted, the scheduler still preempts."""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from localkube.wait import wait_for
from slipway.mlflow import MlflowClient
from slipway_testing import apply_object, report, wait_status

pytestmark = pytest.mark.cluster

STEPS = 30
CHECKPOINT_EVERY = 2


@pytest.mark.parametrize("queued", [False, True], ids=["scheduler", "kueue-admitted"])
def test_serving_preempts_training_which_resumes_from_its_checkpoint(
    kube_api, namespace, operator, cluster, trained, node_gpus, queued, request
):
    operator()
    queue = {}
    if queued:
        request.getfixturevalue("kueue_quota")(gpus=4)
        queue = {"queueName": "gpus"}
    core = client.CoreV1Api(kube_api)
    custom = client.CustomObjectsApi(kube_api)
    clock = time.monotonic()
    timeline: list[tuple[float, str]] = []

    def mark(what: str) -> None:
        timeline.append((time.monotonic() - clock, what))

    model = f"digits-{namespace}"
    apply_object(
        kube_api,
        namespace,
        {
            "apiVersion": "slipway.dev/v1alpha1",
            "kind": "TrainingRun",
            "metadata": {"name": "hog"},
            "spec": {
                "model": {"name": f"train-{namespace}"},
                "image": "ghcr.io/slipway-dev/slipway:0.1.0",
                "command": ["python", "-m", "slipway.workloads.train"],
                "args": ["--steps", str(STEPS), "--checkpoint-every", str(CHECKPOINT_EVERY)],
                "env": [{"name": "SLIPWAY_STEP_SECONDS", "value": "0.5"}],
                "resources": {"gpus": 4},
                "checkpoint": {"size": "1Gi"},
                "failurePolicy": {"retryableExitCodes": [143], "maxRestarts": 1},
                **queue,
            },
        },
    )

    def training_pods(phase: str | None = None) -> list[client.V1Pod]:
        pods = core.list_namespaced_pod(namespace, label_selector="batch.kubernetes.io/job-name=hog-train").items
        return [p for p in pods if phase is None or p.status.phase == phase]

    def progress() -> int:
        tr = custom.get_namespaced_custom_object("slipway.dev", "v1alpha1", namespace, "trainingruns", "hog")
        return int(((tr.get("status") or {}).get("progress") or {}).get("step") or 0)

    wait_for(lambda: progress() >= 4, 120, "training past step 4")
    (victim,) = training_pods("Running")
    assert victim.spec.priority_class_name == "slipway-training"
    mark(f"training at step {progress()} holds 4 GPUs")

    run_id = trained
    with MlflowClient(cluster.mlflow_url) as mlflow:
        mlflow.get_or_create_registered_model(model)
        version = mlflow.create_model_version(model, f"runs:/{run_id}/model", run_id, {}).version
        mlflow.set_alias(model, "candidate", version)
    apply_object(
        kube_api,
        namespace,
        {
            "apiVersion": "slipway.dev/v1alpha1",
            "kind": "InferenceDeployment",
            "metadata": {"name": "server"},
            "spec": {
                "model": {"name": model, "alias": "candidate"},
                "image": "ghcr.io/slipway-dev/slipway:0.1.0",
                "command": ["python", "-m", "slipway.workloads.serve"],
                "resources": {"gpus": 1},
                "autoscaling": {"minReplicas": 1, "maxReplicas": 1},
            },
        },
    )
    mark("InferenceDeployment asking for 1 GPU applied")
    applied = time.monotonic()

    def preempted() -> client.V1Pod | None:
        try:
            pod = core.read_namespaced_pod(victim.metadata.name, namespace)
        except client.ApiException as exc:
            if exc.status == 404:
                return victim  # gone already: its condition was seen by the Job controller
            raise
        conditions = {c.type: c for c in pod.status.conditions or []}
        return pod if "DisruptionTarget" in conditions else None

    wait_for(preempted, 60, "the training pod preempted", interval=0.3)
    mark("training pod preempted (DisruptionTarget)")

    def serving(obj) -> bool:
        return (obj.get("status") or {}).get("phase") == "Promoted"

    wait_status(kube_api, namespace, "InferenceDeployment", "server", serving, 120, "serving on the GPU")
    (server,) = core.list_namespaced_pod(namespace, label_selector="slipway.dev/track=stable").items
    assert server.spec.priority_class_name == "slipway-inference"
    assert server.status.phase == "Running"
    serving_after = time.monotonic() - applied
    assert serving_after <= 30, f"the serving pod ran {serving_after:.1f}s after the InferenceDeployment was applied"
    mark("serving pod Running on the freed GPU")
    stopped_at = progress()

    def pending_replacement() -> bool:
        return any(p.metadata.name != victim.metadata.name and p.status.phase == "Pending" for p in training_pods())

    wait_for(pending_replacement, 60, "a replacement training pod waiting for GPUs")
    tr = custom.get_namespaced_custom_object("slipway.dev", "v1alpha1", namespace, "trainingruns", "hog")
    assert tr["status"]["phase"] != "Failed", tr["status"]
    mark("replacement training pod Pending (3 GPUs free, 4 asked)")

    custom.delete_namespaced_custom_object("slipway.dev", "v1alpha1", namespace, "inferencedeployments", "server")
    mark("InferenceDeployment deleted: its GPU freed")
    wait_for(lambda: training_pods("Running") or training_pods("Succeeded"), 120, "training running again")
    mark("training resumed")
    tr = wait_status(
        kube_api, namespace, "TrainingRun", "hog",
        lambda o: (o.get("status") or {}).get("phase") in ("Succeeded", "Failed"), 240, "training finished",
    )  # fmt: skip
    mark("training Succeeded")
    status = tr["status"]
    assert status["phase"] == "Succeeded", status
    assert status["restarts"] >= 1, status
    assert int(status["lastCheckpoint"]["step"]) >= STEPS - CHECKPOINT_EVERY, status
    with MlflowClient(cluster.mlflow_url) as mlflow:
        run = mlflow.get_run(status["mlflow"]["runId"])
        resumed = int(run.tags["slipway.resumedFromStep"])
        steps = [int(m.value) for m in mlflow.get_metric_history(run.run_id, "step")]
    lost = len(steps) - len(set(steps))  # steps logged by both attempts: done again after the resume
    assert steps.count(1) == 1, f"training started over: {steps}"
    assert resumed >= stopped_at - CHECKPOINT_EVERY, f"progress {stopped_at} when preempted, resumed from {resumed}"
    assert 0 <= lost <= CHECKPOINT_EVERY, f"{lost} steps done twice: {steps}"
    lines = "\n".join(f"  {t:6.1f}s  {what}" for t, what in timeline)
    if queued:
        assert status["queue"]["admitted"] is True and status["queue"]["clusterQueue"], status["queue"]
    report(
        f"\npreemption timeline ({'Kueue-admitted' if queued else 'no Kueue'}; steps lost {lost}, checkpoint "
        f"every {CHECKPOINT_EVERY}):\n{lines}"
    )
