"""Training and serving share GPUs, and serving wins: a TrainingRun holds all 4 GPUs of the node;
an InferenceDeployment asking for one gets it because the real scheduler preempts the training
pod (the admin opted in to a preempting serving class: slipway-inference itself preempts nothing,
see manifests/priorityclasses.yaml; this one outranks slipway-training). The trainer checkpoints on SIGTERM and exits
143, the Job replaces the pod without counting it against maxRestarts, the new pod waits for
GPUs, and once serving gives its GPU back training resumes from the checkpoint and finishes.

The same holds when Kueue admitted the training (its quota accounts for training alone, serving
outside Kueue with the PriorityClass): Kueue keeps the run admitted, the scheduler still preempts.

And when serving is quota-accounted too (README's cohort: serving's ClusterQueue holds the GPUs,
training's borrows them): Kueue admits the serving pod (its plain-pod integration) by taking back
what training borrowed. It evicts the run, whose Job is suspended and whose pod checkpoints on
SIGTERM; the eviction counts as no restart, and Kueue admits the run again once serving is gone."""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from localkube.kube import Kube
from localkube.wait import wait_for
from slipway.mlflow import MlflowClient
from slipway_testing import PREEMPTING, apply_object, inference_deployment, report, wait_status

pytestmark = pytest.mark.cluster

STEPS = 30
# The admin's opt-in: a serving class that preempts lower-priority pods (of any team) for GPUs.
CHECKPOINT_EVERY = 2


@pytest.mark.parametrize(
    "accounting", [None, "training", "both"], ids=["scheduler", "kueue-admitted", "kueue-serving-first"]
)
def test_serving_preempts_training_which_resumes_from_its_checkpoint(
    kube_api, namespace, operator, cluster, trained, node_gpus, accounting, request, monkeypatch
):
    """``accounting``: what Kueue's quota accounts, if anything: None, training alone, or both
    (serving's pods queued in the cohort that README's TrainingRun section describes). Where the
    scheduler preempts, serving runs in the admin's opt-in class PREEMPTING; in the cohort, Kueue
    takes training's GPUs back and serving keeps slipway-inference, which preempts nothing."""
    serving_class = "slipway-inference"
    if accounting != "both":
        Kube(cluster.kubeconfig).ensure("/apis/scheduling.k8s.io/v1/priorityclasses", PREEMPTING)
        serving_class = PREEMPTING["metadata"]["name"]
        monkeypatch.setenv("SLIPWAY_INFERENCE_PRIORITY_CLASS", serving_class)
    operator()
    queue, pod_template = {}, {}
    if accounting == "training":
        request.getfixturevalue("kueue_quota")(gpus=4)
        queue = {"queueName": "gpus"}
    elif accounting == "both":
        serving_queue = request.getfixturevalue("kueue_quota")(gpus=4, serving_first=True)
        queue = {"queueName": "training"}
        pod_template = {"podTemplate": {"labels": {"kueue.x-k8s.io/queue-name": "serving"}}}
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
                # maxRestarts 0 when Kueue evicts the run: were its eviction counted, the run would fail.
                "failurePolicy": {"retryableExitCodes": [143], "maxRestarts": 0 if accounting == "both" else 1},
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
    apply_object(kube_api, namespace, inference_deployment("server", model, resources={"gpus": 1}, **pod_template))
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
        if accounting == "both":  # Kueue suspends the Job, whose controller deletes the pod
            return pod if pod.metadata.deletion_timestamp else None
        return pod if "DisruptionTarget" in conditions else None  # the scheduler marks its victim

    wait_for(preempted, 60, "the training pod preempted", interval=0.3)
    mark(
        "training pod preempted ("
        + ("deleted: Kueue suspended the Job" if accounting == "both" else "DisruptionTarget")
        + ")"
    )

    def serving(obj) -> bool:
        return (obj.get("status") or {}).get("phase") == "Promoted"

    wait_status(kube_api, namespace, "InferenceDeployment", "server", serving, 120, "serving on the GPU")
    (server,) = core.list_namespaced_pod(namespace, label_selector="slipway.dev/track=stable").items
    assert server.spec.priority_class_name == serving_class
    assert server.status.phase == "Running"
    serving_after = time.monotonic() - applied
    assert serving_after <= 30, f"the serving pod ran {serving_after:.1f}s after the InferenceDeployment was applied"
    mark("serving pod Running on the freed GPU")
    stopped_at = progress()

    if accounting == "both":
        workloads = custom.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", namespace, "workloads")["items"]
        pod = server.metadata.name
        (workload,) = [
            w for w in workloads if any(o["name"] == pod for o in w["metadata"].get("ownerReferences") or [])
        ]
        admission = (workload.get("status") or {}).get("admission") or {}
        assert admission.get("clusterQueue") == serving_queue, workload.get("status")  # Kueue accounted serving

        def evicted(obj) -> bool:
            conditions = (obj.get("status") or {}).get("conditions") or []
            return any(c.get("reason") == "PreemptedByKueue" for c in conditions)

        wait_status(kube_api, namespace, "TrainingRun", "hog", evicted, 60, "the run reads PreemptedByKueue")
        assert not training_pods("Running"), "a training pod runs while Kueue holds the run back"
        mark("run PreemptedByKueue: its Job suspended, waiting for quota (3 GPUs unused, 4 asked)")
    else:

        def pending_replacement() -> bool:
            return any(p.metadata.name != victim.metadata.name and p.status.phase == "Pending" for p in training_pods())

        wait_for(pending_replacement, 60, "a replacement training pod waiting for GPUs")
        mark("replacement training pod Pending (3 GPUs free, 4 asked)")
    tr = custom.get_namespaced_custom_object("slipway.dev", "v1alpha1", namespace, "trainingruns", "hog")
    assert tr["status"]["phase"] != "Failed", tr["status"]

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
    assert status["restarts"] >= 1, status  # the training code's starts: it did start again
    if accounting == "both":
        assert status["queue"]["evictions"] >= 1, status["queue"]
    assert int(status["lastCheckpoint"]["step"]) >= STEPS - CHECKPOINT_EVERY, status
    with MlflowClient(cluster.mlflow_url) as mlflow:
        run = mlflow.get_run(status["mlflow"]["runId"])
        resumed = int(run.tags["slipway.dev/resumed-from-step"])
        steps = [int(m.value) for m in mlflow.get_metric_history(run.run_id, "step")]
    lost = len(steps) - len(set(steps))  # steps logged by both attempts: done again after the resume
    assert steps.count(1) == 1, f"training started over: {steps}"
    assert resumed >= stopped_at - CHECKPOINT_EVERY, f"progress {stopped_at} when preempted, resumed from {resumed}"
    assert 0 <= lost <= CHECKPOINT_EVERY, f"{lost} steps done twice: {steps}"
    lines = "\n".join(f"  {t:6.1f}s  {what}" for t, what in timeline)
    if accounting:
        assert status["queue"]["admitted"] is True and status["queue"]["clusterQueue"], status["queue"]
    setup = {None: "no Kueue", "training": "Kueue-admitted training", "both": "Kueue accounts serving too"}[accounting]
    report(f"\npreemption timeline ({setup}; steps lost {lost}, checkpoint every {CHECKPOINT_EVERY}):\n{lines}")
