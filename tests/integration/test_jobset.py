"""Multi-node TrainingRuns as one gang: a JobSet (v0.11.1, built from the Go module proxy, its
webhooks served) that Kueue admits whole or not at all, and that restarts the whole group when a
worker dies, resuming from the checkpoint."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import pytest
from kubernetes import client

from slipway.training import build
from slipway_testing import apply_object, report, training_run, wait_status

pytestmark = pytest.mark.cluster

JOBSET = ("jobset.x-k8s.io", "v1alpha2")
KUEUE = ("kueue.x-k8s.io", "v1beta2")


@dataclass(frozen=True)
class GangWorkload:
    """What Kueue says of the gang's JobSet in its Workload."""

    ranks: int  # pods in its pod sets
    assigned: int  # pods its admission reserved quota for
    admitted_at: str | None  # the Admitted condition's lastTransitionTime, while admitted


@dataclass(frozen=True)
class Sample:
    held: bool  # the blocker still holds its GPUs
    bound: int  # gang pods bound to the node
    active: int  # of those, pods not yet finished
    workloads: tuple[GangWorkload, ...]  # the Workloads owned by the gang's JobSet


def gang_workloads(workloads: list[dict], jobset: str = "gang-train") -> tuple[GangWorkload, ...]:
    found = []
    for w in workloads:
        if not any(
            o.get("kind") == "JobSet" and o.get("name") == jobset for o in w["metadata"].get("ownerReferences") or []
        ):
            continue
        status = w.get("status") or {}
        admitted = next((c for c in status.get("conditions") or [] if c["type"] == "Admitted"), {})
        assignments = (status.get("admission") or {}).get("podSetAssignments") or []
        found.append(
            GangWorkload(
                ranks=sum(int(p.get("count") or 0) for p in w["spec"].get("podSets") or []),
                assigned=sum(int(a.get("count") or 0) for a in assignments),
                admitted_at=admitted.get("lastTransitionTime") if admitted.get("status") == "True" else None,
            )
        )
    return tuple(found)


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
    samples: list[Sample] = []
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
            # Read after the pods: a pod seen bound was bound under the admission this read shows.
            workloads = custom.list_namespaced_custom_object(*KUEUE, namespace, "workloads")["items"]
            bound = [p for p in pods if p.spec.node_name]
            active = sum(1 for p in bound if p.status.phase not in ("Succeeded", "Failed"))
            samples.append(Sample(held, len(bound), active, gang_workloads(workloads)))

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
    while_blocked = [s.bound for s in samples if s.held]
    assert while_blocked and max(while_blocked) == 0, f"gang pods ran beside the blocker: {samples}"
    # Kueue admitted the gang as one Workload for both ranks, once: no rank was bound before that
    # admission, and the group restart started again under it (JobSet's restart, not a second admission).
    seen = [s for s in samples if s.workloads]
    assert seen and all(len(s.workloads) == 1 for s in seen), f"the gang is not one Workload: {samples}"
    assert seen[-1].workloads[0].ranks == 2, seen[-1]
    active = [s for s in samples if s.active]
    assert active and all(s.workloads and s.workloads[0].admitted_at for s in active), (
        f"gang pods bound while the gang's Workload was not admitted: {samples}"
    )
    admissions = {w.admitted_at for s in seen for w in s.workloads if w.admitted_at}
    assert len(admissions) == 1, f"the gang was admitted more than once: {admissions}"
    assert all(w.assigned == 2 for s in seen for w in s.workloads if w.admitted_at), seen
    # Each start of the gang (the first, and the group restart) bound both ranks.
    assert set(bound_at) == {(a, r) for a in ("0", "1") for r in ("0", "1")}, bound_at
    apart = {a: abs(bound_at[(a, "0")] - bound_at[(a, "1")]) for a in ("0", "1")}  # shown, not bounded
    js = custom.get_namespaced_custom_object(*JOBSET, namespace, "jobsets", "gang-train")
    assert js["status"]["restarts"] == 1, js["status"]  # the dead worker restarted the whole group, once
    assert status["restarts"] >= 1
    # Rank 0 died; rank 1 (done at once in this reference trainer) was recreated too: the group restarted.
    assert {rank: len(uids) for rank, uids in incarnations.items()} == {"0": 2, "1": 2}, incarnations
    pods = gang_pods(core, namespace, "gang")
    assert sorted(p.metadata.labels["jobset.sigs.k8s.io/restart-attempt"] for p in pods) == ["1", "1"]
    run = mlflow.get_run(status["mlflow"]["runId"])
    resumed = int(run.tags["slipway.dev/resumed-from-step"])
    steps = [int(m.value) for m in mlflow.get_metric_history(run.run_id, "step")]
    assert resumed >= 4 and steps.count(1) == 1, f"resumed from {resumed}: {steps}"
    report(f"jobset gang: {len(samples)} samples, {len(while_blocked)} while the blocker held 2 of 4 GPUs with 0 gang "
           f"pods bound; one Workload admitted once for both ranks ({', '.join(admissions)}), both ranks bound under "
           f"it at each of 2 starts ({max(apart.values()):.1f} s apart at most); "
           "a worker died at step 7, the group restarted once "
           f"(both ranks recreated) and resumed from step {resumed}")  # fmt: skip
