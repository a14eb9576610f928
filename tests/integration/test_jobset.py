"""Multi-node TrainingRuns as one gang: a JobSet (v0.11.1, built from the Go module proxy, its
webhooks served) that Kueue admits whole or not at all, and that restarts the whole group when a
worker dies, resuming from the checkpoint."""

from __future__ import annotations

import threading
import time

import pytest
from kubernetes import client

from slipway.training import build
from slipway_testing import apply_object, report, training_run, wait_status

pytestmark = pytest.mark.cluster

JOBSET = ("jobset.x-k8s.io", "v1alpha2")


def finished(obj) -> bool:  # type: ignore[no-untyped-def]
    return (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def gang_pods(core: client.CoreV1Api, namespace: str, run: str) -> list[client.V1Pod]:
    return core.list_namespaced_pod(namespace, label_selector=f"jobset.sigs.k8s.io/jobset-name={run}-train").items


def test_several_nodes_default_to_a_jobset_with_torchrun_env(kube_api, namespace, operator, jobset):
    operator()
    apply_object(kube_api, namespace, training_run("multi", nodes=2))
    tr = wait_status(kube_api, namespace, "TrainingRun", "multi", finished, 180, "finish")
    assert tr["status"]["phase"] == "Succeeded", tr["status"]
    assert tr["status"]["runtime"] == "JobSet"
    js = client.CustomObjectsApi(kube_api).get_namespaced_custom_object(*JOBSET, namespace, "jobsets", "multi-train")
    (workers,) = js["spec"]["replicatedJobs"]
    env = {e["name"]: e.get("value") for e in workers["template"]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["WORLD_SIZE"] == "2"
    assert env["MASTER_ADDR"] == "multi-train-workers-0-0.multi-workers"
    # JobSet's headless Service resolves the pods by those names.
    assert client.CoreV1Api(kube_api).read_namespaced_service("multi-workers", namespace).spec.cluster_ip == "None"


def test_a_run_whose_name_is_long_and_starts_with_a_digit_gets_a_jobset_that_jobset_accepts(
    kube_api, namespace, operator, jobset
):
    """JobSet's webhook refuses a JobSet whose Jobs' or pods' names would not be DNS-1035 labels
    (a letter first, 63 characters with the pods' random suffix): the run's name is derived so."""
    name = "7b.llama-3.1-8b.instruct-finetune-2024-06-01-lr-3e-4-seed-7-nodes2"
    operator()
    apply_object(kube_api, namespace, training_run(name, nodes=2, model="digits-long-jobset"))
    tr = wait_status(kube_api, namespace, "TrainingRun", name, finished, 180, "finish")
    assert tr["status"]["phase"] == "Succeeded", tr["status"]
    assert tr["status"]["runtime"] == "JobSet"
    jobset_name = build.jobset_name(name)
    assert jobset_name[0].isalpha() and len(jobset_name) <= build.MAX_JOBSET_NAME
    client.CustomObjectsApi(kube_api).get_namespaced_custom_object(*JOBSET, namespace, "jobsets", jobset_name)
    core = client.CoreV1Api(kube_api)
    pods = core.list_namespaced_pod(namespace, label_selector=f"jobset.sigs.k8s.io/jobset-name={jobset_name}").items
    ranks = {p.metadata.annotations["batch.kubernetes.io/job-completion-index"]: p for p in pods}
    assert sorted(ranks) == ["0", "1"]
    rank0 = ranks["0"]
    env = {e.name: e.value for e in rank0.spec.containers[0].env}
    assert env["MASTER_ADDR"] == f"{rank0.spec.hostname}.{rank0.spec.subdomain}"


def test_kueue_admits_the_gang_whole_and_a_dead_worker_restarts_the_group_from_its_checkpoint(
    kube_api, namespace, operator, jobset, kueue_quota, node_gpus, mlflow
):
    operator()
    kueue_quota(gpus=4)
    core = client.CoreV1Api(kube_api)
    custom = client.CustomObjectsApi(kube_api)
    # 2 of the quota's 4 GPUs held by a one-node run: the gang (2 nodes x 2 GPUs) cannot start yet.
    blocker = training_run("blocker", steps=16, env={"SLIPWAY_STEP_SECONDS": "0.5"}, queueName="gpus",
                           resources={"gpus": 2})  # fmt: skip
    apply_object(kube_api, namespace, blocker)
    wait_status(kube_api, namespace, "TrainingRun", "blocker", lambda o: (o.get("status") or {}).get("phase")
                == "Running", 120, "the blocker running")  # fmt: skip
    dies = {"SLIPWAY_STEP_SECONDS": "0.5", "SLIPWAY_FAIL_AT_STEP": "7", "SLIPWAY_FAIL_EXIT_CODE": "137"}
    policy = {"retryableExitCodes": [137], "maxRestarts": 2}
    gang = training_run("gang", nodes=2, steps=10, queueName="gpus", resources={"gpus": 2}, env=dies,
                        checkpoint={"size": "1Gi"}, failurePolicy=policy)  # fmt: skip
    apply_object(kube_api, namespace, gang)
    samples: list[tuple[bool, int]] = []  # (blocker still holds its GPUs, gang pods bound to the node)
    incarnations: dict[str, set[str]] = {"0": set(), "1": set()}  # rank -> uids of its pods
    bound_at: dict[tuple[str, str], float] = {}  # (restart attempt, rank) -> when its pod was first seen bound
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.5):
            held = any(p.status.phase in ("Pending", "Running") for p in core.list_namespaced_pod(
                namespace, label_selector="batch.kubernetes.io/job-name=blocker-train").items)  # fmt: skip
            pods = gang_pods(core, namespace, "gang")
            for p in pods:
                rank = (p.metadata.annotations or {}).get("batch.kubernetes.io/job-completion-index", "")
                incarnations.setdefault(rank, set()).add(p.metadata.uid)
                attempt = (p.metadata.labels or {}).get("jobset.sigs.k8s.io/restart-attempt", "")
                if p.spec.node_name:
                    bound_at.setdefault((attempt, rank), time.monotonic())
            samples.append((held, sum(1 for p in pods if p.spec.node_name)))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        queued = wait_status(kube_api, namespace, "TrainingRun", "gang",
                             lambda o: "insufficient unused quota" in next((c.get("message") or "" for c in
                             (o.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"), ""),
                             60, "the gang queued for quota")  # fmt: skip
        assert queued["status"]["runtime"] == "JobSet"
        wait_status(kube_api, namespace, "TrainingRun", "blocker", finished, 120, "the blocker finished")
        tr = wait_status(kube_api, namespace, "TrainingRun", "gang", finished, 240, "the gang finished")
    finally:
        stop.set()
        sampler.join(5)
    status = tr["status"]
    assert status["phase"] == "Succeeded", status
    while_blocked = [bound for held, bound in samples if held]
    assert while_blocked and max(while_blocked) == 0, f"gang pods ran beside the blocker: {samples}"
    # Each start of the gang (the first, and the group restart) bound both ranks at once: no partial start.
    assert {a for a, _ in bound_at} == {"0", "1"}, bound_at
    apart = {a: abs(bound_at[(a, "0")] - bound_at[(a, "1")]) for a in ("0", "1")}
    assert max(apart.values()) <= 1.0, f"the ranks of a start were bound apart: {apart} s"
    js = custom.get_namespaced_custom_object(*JOBSET, namespace, "jobsets", "gang-train")
    assert js["status"]["restarts"] == 1, js["status"]  # the dead worker restarted the whole group, once
    assert status["restarts"] >= 1
    # Rank 0 died; rank 1 (done at once in this reference trainer) was recreated too: the group restarted.
    assert {rank: len(uids) for rank, uids in incarnations.items()} == {"0": 2, "1": 2}, incarnations
    pods = gang_pods(core, namespace, "gang")
    assert sorted(p.metadata.labels["jobset.sigs.k8s.io/restart-attempt"] for p in pods) == ["1", "1"]
    run = mlflow.get_run(status["mlflow"]["runId"])
    resumed = int(run.tags["slipway.resumedFromStep"])
    steps = [int(m.value) for m in mlflow.get_metric_history(run.run_id, "step")]
    assert resumed >= 4 and steps.count(1) == 1, f"resumed from {resumed}: {steps}"
    report(f"jobset gang: {len(samples)} samples, {len(while_blocked)} while the blocker held 2 of 4 GPUs with 0 gang "
           f"pods bound; both ranks bound within {max(apart.values()):.1f}s of each other at each of 2 starts; "
           "a worker died at step 7, the group restarted once "
           f"(both ranks recreated) and resumed from step {resumed}")  # fmt: skip
