"""Faults of pods: the active operator replica of the Deployment in manifests/ (2 replicas)
SIGKILLed mid-training, a training pod SIGKILLed between checkpoints, and a namespace deleted
while the operator is scaled to 0."""

from __future__ import annotations

import signal
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from kubernetes import client

from faults import ledger
from faults.scenario import progress, promoted, serving, training, wait_artifact
from localkube.audit import audited_kubeconfig
from localkube.testing import kill_pod_process
from localkube.wait import wait_for
from slipway.mlflow import MlflowClient
from slipway_e2e.deploy import NAMESPACE as SYSTEM
from slipway_e2e.deploy import OPERATOR, admit_team, deploy_operator, kubectl
from slipway_e2e.lifecycle import list_all
from slipway_testing import apply_object, get_object, read_or_none, wait_status

pytestmark = pytest.mark.cluster

LEASE = "slipway-operator"
USER = "slipway-faults-pods"


def finished(obj) -> bool:
    return (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def lease(kube_api) -> client.V1LeaseSpec | None:
    found = read_or_none(client.CoordinationV1Api(kube_api).read_namespaced_lease, LEASE, SYSTEM)
    return found.spec if found else None


def lease_holder(kube_api) -> str:
    spec = lease(kube_api)
    return (spec.holder_identity or "") if spec else ""


def renewed_since(kube_api, moment: datetime) -> str | None:
    """The Lease's holder if it renewed the Lease after ``moment`` (a live leader), else None."""
    spec = lease(kube_api)
    if spec is None or not spec.holder_identity or spec.renew_time is None or spec.renew_time <= moment:
        return None
    return str(spec.holder_identity)


def operator_pods(kube_api) -> list[client.V1Pod]:
    pods = client.CoreV1Api(kube_api).list_namespaced_pod(SYSTEM, label_selector="app.kubernetes.io/component=operator")
    return [p for p in pods.items if p.metadata.deletion_timestamp is None]


@pytest.fixture
def deployed_operator(cluster, kube_api):
    """The operator from manifests/ (2 replicas, a PodDisruptionBudget), removed afterwards."""
    deploy_operator(cluster)
    wait_for(lambda: lease_holder(kube_api) in {p.metadata.name for p in operator_pods(kube_api)}, 90,
             "a replica holding the Lease")  # fmt: skip
    yield
    kubectl(cluster, "-n", SYSTEM, "delete", "deployment", OPERATOR, "--wait=true", check=False)
    wait_for(lambda: not operator_pods(kube_api), 90, "the operator pods gone")


@pytest.mark.serial  # the operator of manifests/ watches every namespace
def test_the_active_replica_sigkilled_mid_training(cluster, kube_api, namespace, deployed_operator, figures):
    model = f"digits-{namespace}"
    admit_team(kube_api, namespace, model)  # manifests/ runs in multi-tenant mode
    apply_object(kube_api, namespace, training("run", model, steps=40, SLIPWAY_STEP_SECONDS="1"))
    before = wait_status(kube_api, namespace, "TrainingRun", "run", lambda o: progress(o) >= 2, 120, "step 2")
    takeovers = []
    # 1. The leader's process dies: its node restarts the container, which, with the same identity
    #    (the pod name), renews the Lease it holds. 2. The leader's node is lost (process killed and
    #    pod force-deleted): a standby takes the Lease once it expires.
    for lost_node in (False, True):
        leader = lease_holder(kube_api)
        at_step = progress(get_object(kube_api, namespace, "TrainingRun", "run"))
        kill_pod_process(Path(cluster.directory), SYSTEM, leader)
        killed, killed_at = time.monotonic(), datetime.now(UTC)
        if lost_node:
            client.CoreV1Api(kube_api).delete_namespaced_pod(leader, SYSTEM, grace_period_seconds=0)
        new_leader = wait_for(lambda t=killed_at: renewed_since(kube_api, t), 60, "a live leader", interval=0.2)
        took = time.monotonic() - killed
        wait_status(kube_api, namespace, "TrainingRun", "run", lambda o, s=at_step: progress(o) > s, 60,
                    "progress written by the leader")  # fmt: skip
        progressed = time.monotonic() - killed
        what = "node lost (SIGKILL, pod force-deleted)" if lost_node else "process SIGKILLed"
        who = "its restarted container" if new_leader == leader else "another replica"
        figures.inject(f"{what}: active replica {leader}, at training step {at_step}")
        figures.took(f"{what}: a live leader renewing the Lease ({who})", took)
        figures.took(f"{what}: progress written again (progress poll 15 s)", progressed)
        takeovers.append((lost_node, leader, new_leader, took))
    done = wait_status(kube_api, namespace, "TrainingRun", "run", finished, 180, "finished")
    artifact = wait_artifact(kube_api, namespace, "run", 240)
    found = ledger.take(cluster, kube_api, namespace, None, datetime.now(UTC))
    jobs = sorted(j.metadata.name for j in client.BatchV1Api(kube_api).list_namespaced_job(namespace).items)
    figures.count(run=done["status"]["phase"], artifact=artifact["status"]["phase"], jobs=jobs,
                  mlflow=f"runs {dict(found.runs)}, versions {dict(found.versions)}")  # fmt: skip
    assert all(took < 30 for *_, took in takeovers)
    [(_, lost, successor, _)] = [t for t in takeovers if t[0]]
    assert successor != lost, "a force-deleted pod cannot lead"
    assert done["status"]["phase"] == "Succeeded" and progress(done) == 40
    assert jobs == ["run-quantize", "run-train", "run-validate"]
    assert found.made_twice() == {} and len(found.runs) == 3 and progress(before) >= 2


def test_a_training_pod_sigkilled_resumes_from_its_checkpoint(cluster, kube_api, namespace, operators, figures):
    since = datetime.now(UTC)
    operators(standalone=True, kubeconfig=audited_kubeconfig(cluster, USER))
    every = 4
    apply_object(kube_api, namespace, training("run", f"digits-{namespace}", steps=16, checkpoint_every=every,
                                               SLIPWAY_STEP_SECONDS="1"))  # fmt: skip
    running = wait_status(kube_api, namespace, "TrainingRun", "run", lambda o: progress(o) >= 6, 120, "step 6")
    run_id = running["status"]["mlflow"]["runId"]
    [pod] = client.CoreV1Api(kube_api).list_namespaced_pod(namespace, label_selector="job-name=run-train").items
    with MlflowClient(cluster.mlflow_url) as mlflow:
        kill_pod_process(Path(cluster.directory), namespace, pod.metadata.name, signal.SIGKILL)
        killed = time.monotonic()
        at_kill = max(int(m.value) for m in mlflow.get_metric_history(run_id, "step"))
        resumed = wait_for(lambda: mlflow.get_run(run_id).tags.get("slipway.dev/resumed-from-step"), 120,
                           "a second attempt resuming", interval=0.5)  # fmt: skip
        resumed_after = time.monotonic() - killed
        done = wait_status(kube_api, namespace, "TrainingRun", "run", finished, 180, "finished")
        steps = [int(m.value) for m in mlflow.get_metric_history(run_id, "step")]
    found = ledger.take(cluster, kube_api, namespace, USER, since)
    pods = client.CoreV1Api(kube_api).list_namespaced_pod(namespace, label_selector="job-name=run-train").items
    lost = at_kill - int(resumed)
    figures.inject(f"SIGKILL of training pod {pod.metadata.name} after step {at_kill} (checkpoint every {every})")
    figures.took("kill to the second attempt resuming", resumed_after)
    figures.count(resumed_from_step=int(resumed), steps_lost=lost, restarts=done["status"].get("restarts"),
                  pods=len(pods), run=done["status"]["phase"], mlflow_runs=dict(found.runs),
                  steps_logged=len(steps))  # fmt: skip
    assert done["status"]["phase"] == "Succeeded" and progress(done) == 16
    assert done["status"]["restarts"] == 1
    assert 0 <= lost <= every, f"lost {lost} steps, more than one checkpoint interval ({every})"
    assert found.created["jobs/run-train"] == 1 and found.made_twice() == {}
    assert steps.count(1) == 1, "the second attempt started over"


def test_a_namespace_deleted_with_the_operator_at_zero(cluster, kube_api, namespace, operators, figures):
    operator = operators(standalone=True)
    model = f"digits-{namespace}"
    apply_object(kube_api, namespace, training("run", model, steps=4))
    apply_object(kube_api, namespace, serving(model))
    version = wait_artifact(kube_api, namespace, "run", 240)["status"]["quantizedVersion"]
    wait_status(kube_api, namespace, "InferenceDeployment", "digits", promoted(version), 180, "serving")
    operator.stop(signal.SIGKILL)
    objects = list_all(kube_api, namespace)
    finalizers = sorted({f for o in objects for f in o["metadata"].get("finalizers") or []})
    core, apps, batch = client.CoreV1Api(kube_api), client.AppsV1Api(kube_api), client.BatchV1Api(kube_api)
    children = {
        "pods": len(core.list_namespaced_pod(namespace).items),
        "deployments": len(apps.list_namespaced_deployment(namespace).items),
        "jobs": len(batch.list_namespaced_job(namespace).items),
        "services": len(core.list_namespaced_service(namespace).items),
        "pvcs": len(core.list_namespaced_persistent_volume_claim(namespace).items),
    }
    core.delete_namespace(namespace)
    deleted = time.monotonic()

    wait_for(
        lambda: read_or_none(core.read_namespace, namespace) is None,
        180,
        f"namespace {namespace} gone with the operator away",
        interval=0.5,
    )
    figures.inject(f"namespace deleted with the operator stopped (SIGKILL), holding {len(objects)} Slipway "
                   f"objects and {children}")  # fmt: skip
    figures.count(finalizers_on_slipway_objects=finalizers)
    figures.took("delete to the namespace gone", time.monotonic() - deleted)
    assert finalizers == []
