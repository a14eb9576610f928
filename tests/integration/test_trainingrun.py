"""TrainingRun end to end on the local cluster with real MLflow: the operator in-process (kopf)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from localkube.wait import wait_for
from slipway.mlflow import tag_filter
from slipway_testing import apply_object, condition, get_object, training_run, wait_status

pytestmark = pytest.mark.cluster


def phase_is(*phases: str):
    return lambda obj: (obj.get("status") or {}).get("phase") in phases


def jobs_of(kube_api, namespace: str, name: str) -> list[Any]:
    return (
        client.BatchV1Api(kube_api)
        .list_namespaced_job(namespace, label_selector=f"slipway.dev/trainingrun={name}")
        .items
    )


def pods_of(kube_api, namespace: str, name: str) -> list[Any]:
    return (
        client.CoreV1Api(kube_api)
        .list_namespaced_pod(namespace, label_selector=f"slipway.dev/trainingrun={name}")
        .items
    )


def test_run_succeeds_with_mlflow_run_progress_and_artifact(kube_api, namespace, operator, mlflow):
    operator()
    body = training_run("ok", checkpoint={"size": "1Gi"}, artifact={"quantization": {"method": "none"}})
    apply_object(kube_api, namespace, body)
    tr = wait_status(kube_api, namespace, "TrainingRun", "ok", phase_is("Succeeded", "Failed"), 180, "finish")
    status = tr["status"]
    assert status["phase"] == "Succeeded", status
    # Ready once what it trained is usable: its ModelArtifact validated.
    wait_status(
        kube_api, namespace, "TrainingRun", "ok", lambda o: condition(o, "Ready").get("status") == "True", 240, "Ready"
    )
    tr = get_object(kube_api, namespace, "TrainingRun", "ok")
    status = tr["status"]
    assert get_object(kube_api, namespace, "ModelArtifact", "ok")["status"]["phase"] == "Validated"
    assert "ModelArtifact ok validated" in condition(tr, "Ready")["message"]
    assert condition(tr, "Trained")["status"] == "True"
    assert status["progress"]["step"] == 6
    assert status["progress"]["totalSteps"] == 6
    assert "loss" in status["progress"]["metrics"]
    assert status["lastCheckpoint"]["step"] == 6
    assert status["mlflow"]["runUrl"].endswith(
        f"/#/experiments/{status['mlflow']['experimentId']}/runs/{status['mlflow']['runId']}"
    )
    assert status["artifactRef"] == {"name": "ok"}
    assert status["observedGeneration"] == tr["metadata"]["generation"]
    run = mlflow.get_run(status["mlflow"]["runId"])
    assert run.status == "FINISHED"
    assert run.metrics["step"].value == 6
    names = {a.path.split("/")[-1] for a in mlflow.list_artifacts(f"runs:/{run.run_id}/model")}
    assert "model.onnx" in names
    artifact = get_object(kube_api, namespace, "ModelArtifact", "ok")
    assert artifact["spec"]["source"] == {"trainingRunRef": {"name": "ok"}}
    assert artifact["metadata"]["ownerReferences"][0]["name"] == "ok"


def test_retryable_exit_resumes_from_checkpoint_and_counts_restart(kube_api, namespace, operator, mlflow):
    operator()
    body = training_run(
        "resume",
        steps=8,
        env={"SLIPWAY_FAIL_AT_STEP": "5", "SLIPWAY_FAIL_EXIT_CODE": "137"},
        checkpoint={"size": "1Gi"},
        failurePolicy={"retryableExitCodes": [137], "maxRestarts": 2},
    )
    apply_object(kube_api, namespace, body)
    tr = wait_status(kube_api, namespace, "TrainingRun", "resume", phase_is("Succeeded", "Failed"), 240, "finish")
    status = tr["status"]
    assert status["phase"] == "Succeeded", status
    assert status["restarts"] == 1
    run = mlflow.get_run(status["mlflow"]["runId"])
    assert int(run.tags["slipway.dev/resumed-from-step"]) == 4
    steps = [int(m.value) for m in mlflow.get_metric_history(run.run_id, "step")]
    assert steps[0] == 1 and steps[-1] == 8
    assert steps.count(1) == 1, f"the second attempt started over: {steps}"
    # kubectl logs (the node agent's kubelet API) shows each attempt's own output.
    core = client.CoreV1Api(kube_api)
    pods = core.list_namespaced_pod(namespace, label_selector="batch.kubernetes.io/job-name").items
    first, second = sorted(pods, key=lambda p: p.metadata.creation_timestamp)
    assert "no checkpoint" in core.read_namespaced_pod_log(first.metadata.name, namespace)
    assert "step 4 of 8" in core.read_namespaced_pod_log(second.metadata.name, namespace, tail_lines=200)


def test_permanent_exit_code_fails_at_once(kube_api, namespace, operator):
    operator()
    body = training_run(
        "perm",
        env={"SLIPWAY_FAIL_AT_STEP": "2", "SLIPWAY_FAIL_EXIT_CODE": "3"},
        failurePolicy={"permanentExitCodes": [3], "maxRestarts": 5},
    )
    apply_object(kube_api, namespace, body)
    tr = wait_status(kube_api, namespace, "TrainingRun", "perm", phase_is("Failed", "Succeeded"), 120, "fail")
    stalled = condition(tr, "Stalled")
    assert tr["status"]["phase"] == "Failed"
    assert stalled["status"] == "True"
    assert stalled["reason"] == "PermanentExitCode"
    assert "code 3" in stalled["message"]
    assert len(pods_of(kube_api, namespace, "perm")) == 1, "a permanent exit code must not be retried"


def test_suspend_keeps_checkpoint_and_resume_continues(kube_api, namespace, operator, mlflow):
    operator()
    body = training_run("pause", steps=12, env={"SLIPWAY_STEP_SECONDS": "1"}, checkpoint={"size": "1Gi"})
    apply_object(kube_api, namespace, body)
    wait_status(
        kube_api,
        namespace,
        "TrainingRun",
        "pause",
        lambda o: ((o.get("status") or {}).get("lastCheckpoint") or {}).get("step", 0) >= 4,
        120,
        "checkpoint 4",
    )
    api = client.CustomObjectsApi(kube_api)
    api.patch_namespaced_custom_object(
        "slipway.dev", "v1alpha1", namespace, "trainingruns", "pause", {"spec": {"suspend": True}}
    )
    wait_status(kube_api, namespace, "TrainingRun", "pause", phase_is("Suspended"), 60, "suspended")
    from localkube.wait import wait_for

    wait_for(
        lambda: not [p for p in pods_of(kube_api, namespace, "pause") if p.status.phase in ("Running", "Pending")],
        60,
        "the training pods to go away",
    )
    claim = client.CoreV1Api(kube_api).read_namespaced_persistent_volume_claim("pause-checkpoints", namespace)
    assert claim.status.phase == "Bound"
    api.patch_namespaced_custom_object(
        "slipway.dev", "v1alpha1", namespace, "trainingruns", "pause", {"spec": {"suspend": False}}
    )
    tr = wait_status(kube_api, namespace, "TrainingRun", "pause", phase_is("Succeeded", "Failed"), 180, "finish")
    assert tr["status"]["phase"] == "Succeeded"
    run = mlflow.get_run(tr["status"]["mlflow"]["runId"])
    assert int(run.tags["slipway.dev/resumed-from-step"]) >= 4


def test_more_gpus_than_any_node_shows_schedulers_reason(kube_api, namespace, operator):
    operator()
    apply_object(kube_api, namespace, training_run("greedy", resources={"gpus": 5}))
    tr = wait_status(
        kube_api,
        namespace,
        "TrainingRun",
        "greedy",
        lambda o: condition(o, "Ready").get("reason") == "Unschedulable",
        60,
        "Unschedulable",
    )
    assert "Insufficient nvidia.com/gpu" in condition(tr, "Ready")["message"]
    assert tr["status"]["phase"] == "Pending"


def test_sizing_that_cannot_fit_is_refused_before_any_pod(kube_api, namespace, operator):
    operator()
    body = training_run(
        "huge", resources={"gpus": 1}, sizing={"parameters": 70_000_000_000, "batchSize": 8, "sequenceLength": 4096}
    )
    apply_object(kube_api, namespace, body)
    tr = wait_status(kube_api, namespace, "TrainingRun", "huge", phase_is("Failed"), 60, "refused")
    stalled = condition(tr, "Stalled")
    assert stalled["reason"] == "InsufficientGPUMemory"
    assert "each GPU has 80.0 GiB" in stalled["message"]
    assert tr["status"]["sizing"]["fits"] is False
    assert jobs_of(kube_api, namespace, "huge") == []


def test_a_job_a_resourcequota_forbids_reads_stalled_and_is_made_once_the_quota_is_lifted(
    kube_api, namespace, operator
):
    # README: a 403 is no outage; the object reads Stalled/Forbidden and the call is tried again
    # every 60 s, so a policy lifted meanwhile takes effect without a restart. Lifting a quota wakes
    # nothing: only the retry can make the Job.
    core = client.CoreV1Api(kube_api)
    quota = {"metadata": {"name": "no-jobs"}, "spec": {"hard": {"count/jobs.batch": "0"}}}
    core.create_namespaced_resource_quota(namespace, quota)
    # The API server enforces what the quota's status holds: wait for the controller to fill it.
    wait_for(
        lambda: (
            (core.read_namespaced_resource_quota("no-jobs", namespace).status.used or {}).get("count/jobs.batch") == "0"
        ),
        30,
        "the quota's usage to be counted",
    )
    operator()
    apply_object(kube_api, namespace, training_run("quota"))
    tr = wait_status(
        kube_api,
        namespace,
        "TrainingRun",
        "quota",
        lambda o: condition(o, "Stalled").get("reason") == "Forbidden",
        60,
        "Stalled Forbidden",
    )
    stalled = condition(tr, "Stalled")
    assert stalled["status"] == "True"
    assert "no-jobs" in stalled["message"] and "tried again every 60s" in stalled["message"], stalled
    assert jobs_of(kube_api, namespace, "quota") == []
    core.delete_namespaced_resource_quota("no-jobs", namespace)
    tr = wait_status(kube_api, namespace, "TrainingRun", "quota", phase_is("Succeeded", "Failed"), 240, "finish")
    assert tr["status"]["phase"] == "Succeeded", tr["status"]
    assert condition(tr, "Stalled").get("status") != "True", condition(tr, "Stalled")
    assert len(jobs_of(kube_api, namespace, "quota")) == 1


def test_two_nodes_make_an_indexed_job_with_torchrun_env_and_headless_service(kube_api, namespace, operator):
    operator()
    apply_object(kube_api, namespace, training_run("multi", nodes=2, runtime="Job"))
    tr = wait_status(kube_api, namespace, "TrainingRun", "multi", phase_is("Succeeded", "Failed"), 180, "finish")
    assert tr["status"]["phase"] == "Succeeded"
    (job,) = jobs_of(kube_api, namespace, "multi")
    assert job.spec.completion_mode == "Indexed"
    assert job.spec.completions == 2
    env = {e.name: e for e in job.spec.template.spec.containers[0].env}
    assert env["WORLD_SIZE"].value == "2"
    assert env["MASTER_ADDR"].value == "multi-train-0.multi-workers"
    svc = client.CoreV1Api(kube_api).read_namespaced_service("multi-workers", namespace)
    assert svc.spec.cluster_ip == "None"


def test_operator_restart_mid_run_leaves_one_job_and_one_mlflow_run(kube_api, namespace, operator, mlflow):
    op = operator()
    body = training_run("crash", steps=10, env={"SLIPWAY_STEP_SECONDS": "0.5"}, checkpoint={"size": "1Gi"})
    created = apply_object(kube_api, namespace, body)
    wait_status(
        kube_api,
        namespace,
        "TrainingRun",
        "crash",
        lambda o: ((o.get("status") or {}).get("progress") or {}).get("step", 0) >= 2,
        120,
        "step 2",
    )
    op.restart()
    tr = wait_status(kube_api, namespace, "TrainingRun", "crash", phase_is("Succeeded", "Failed"), 180, "finish")
    assert tr["status"]["phase"] == "Succeeded"
    assert len(jobs_of(kube_api, namespace, "crash")) == 1
    experiment = mlflow.get_or_create_experiment("digits-crash")
    runs = mlflow.search_runs([experiment], filter=tag_filter("slipway.dev/uid", created["metadata"]["uid"]))
    assert len(runs) == 1
