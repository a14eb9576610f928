"""A TrainingRun's checkpoint claim across a delete (spec.checkpoint.whenDeleted) and a restore, on
the local cluster (its garbage collector, PV controller and provisioner) with real MLflow: a run cut
short and applied again resumes from its checkpoint (the step the reference trainer reports it
resumed from, the MLflow tag ``slipway.dev/resumed-from-step``), in one MLflow run; a claim that is not
this TrainingRun's is refused before any Job mounts it."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client

from localkube.audit import audited_kubeconfig, requests_by
from localkube.wait import wait_for
from slipway.mlflow import MlflowClient, tag_filter
from slipway.training import build
from slipway_testing import apply_object, condition, custom, get_object, report, training_run, wait_status

pytestmark = pytest.mark.cluster

USER = "slipway-checkpoint-retention"
CLAIM = "digits-checkpoints"


def settled(obj: dict[str, Any]) -> bool:
    return (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def refused(obj: dict[str, Any]) -> bool:
    return condition(obj, "Stalled").get("reason") == "OwnedByOther"


def checkpointed(step: int) -> Any:
    return lambda o: ((o.get("status") or {}).get("lastCheckpoint") or {}).get("step", 0) >= step


def training_runs(mlflow: MlflowClient, model: str, owner: str) -> list[str]:
    found = mlflow.search_runs([mlflow.get_or_create_experiment(model)], filter=tag_filter(
        "slipway.dev/trainingrun", owner))  # fmt: skip
    return sorted(r.run_id for r in found)


def jobs_created(cluster: Any, namespace: str, since: datetime) -> int:
    return sum(1 for r in requests_by(cluster, USER, since) if r.verb == "create" and r.resource == "jobs"
               and r.namespace == namespace and r.subresource is None and 200 <= r.code < 300)  # fmt: skip


def delete_run(kube_api: client.ApiClient, namespace: str) -> None:
    """Delete the TrainingRun mid-training; wait until it, its Job and its pods are gone."""
    custom(kube_api).delete_namespaced_custom_object("slipway.dev", "v1alpha1", namespace, "trainingruns", "digits")
    batch, core = client.BatchV1Api(kube_api), client.CoreV1Api(kube_api)

    def gone() -> bool:
        try:
            get_object(kube_api, namespace, "TrainingRun", "digits")
            return False
        except client.ApiException as exc:
            if exc.status != 404:
                raise
        return not batch.list_namespaced_job(namespace).items and not core.list_namespaced_pod(namespace).items

    wait_for(gone, 120, "the TrainingRun, its Job and its pods deleted")


def claim_of(kube_api: client.ApiClient, namespace: str) -> client.V1PersistentVolumeClaim | None:
    try:
        return client.CoreV1Api(kube_api).read_namespaced_persistent_volume_claim(CLAIM, namespace)
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def resumed_in_one_run(
    kube_api: client.ApiClient, namespace: str, mlflow: MlflowClient, run_id: str, how: str, since: datetime,
    cluster: Any, runs_before: list[str],
) -> dict[str, Any]:  # fmt: skip
    """Wait for the TrainingRun applied again to finish; check it went on in ``run_id`` from a checkpoint."""
    done = wait_status(kube_api, namespace, "TrainingRun", "digits", settled, 300, f"finished after {how}")
    run, model = mlflow.get_run(run_id), done["spec"]["model"]["name"]
    steps = [int(m.value) for m in mlflow.get_metric_history(run_id, "step")]
    runs, jobs = training_runs(mlflow, model, f"{namespace}/digits"), jobs_created(cluster, namespace, since)
    resumed = run.tags.get("slipway.dev/resumed-from-step", "")
    report(f"{how}: run shown {done['status']['mlflow']['runId']} (first {run_id}), resumed from step "
           f"{resumed or 'none'}, steps logged {len(steps)} (step 1 {steps.count(1)}x), training runs "
           f"{len(runs_before)} -> {len(runs)}, Jobs created {jobs}")  # fmt: skip
    assert done["status"]["phase"] == "Succeeded" and done["status"]["mlflow"]["runId"] == run_id
    assert resumed.isdigit() and int(resumed) > 0, f"the new Job started over: {run.tags}"
    assert steps.count(1) == 1 and runs == runs_before == [run_id] and jobs == 1
    events = client.CoreV1Api(kube_api).list_namespaced_event(namespace).items
    assert any(e.reason == "AdoptedCheckpoint" and CLAIM in e.message for e in events)
    return done


def test_a_retained_claim_outlives_its_trainingrun_and_the_trainingrun_applied_again_resumes_from_it(
    kube_api, namespace, operator, cluster, mlflow
):
    operator(kubeconfig=audited_kubeconfig(cluster, USER))
    model = f"digits-{namespace}"
    body = training_run("digits", steps=16, model=model, env={"SLIPWAY_STEP_SECONDS": "0.5"},
                        checkpoint={"size": "1Gi", "whenDeleted": "Retain"})  # fmt: skip
    apply_object(kube_api, namespace, body)
    running = wait_status(kube_api, namespace, "TrainingRun", "digits", checkpointed(4), 180, "checkpoint 4")
    run_id, claim = running["status"]["mlflow"]["runId"], claim_of(kube_api, namespace)
    assert claim is not None and not claim.metadata.owner_references  # Retain: no owner at all
    delete_run(kube_api, namespace)  # mid-training, as an Argo CD prune: the run stays open, cut short
    kept = claim_of(kube_api, namespace)
    assert kept is not None and kept.metadata.uid == claim.metadata.uid and not kept.metadata.deletion_timestamp
    before, since = training_runs(mlflow, model, f"{namespace}/digits"), datetime.now(UTC)
    apply_object(kube_api, namespace, body)  # the same YAML: a new uid, no status
    resumed_in_one_run(kube_api, namespace, mlflow, run_id, "Retain, deleted and applied again", since, cluster,
                       before)  # fmt: skip
    after = claim_of(kube_api, namespace)
    assert after is not None and after.metadata.uid == claim.metadata.uid and not after.metadata.owner_references
    # The same name with a spec that differs is other work: it never resumes from these checkpoints.
    delete_run(kube_api, namespace)
    changed = {**body, "spec": {**body["spec"], "args": [*body["spec"]["args"], "--hidden-units", "24"]}}
    apply_object(kube_api, namespace, changed)
    stalled = wait_status(kube_api, namespace, "TrainingRun", "digits", refused, 60, "Stalled OwnedByOther")
    report(f"Retain, applied again with a spec that differs: {condition(stalled, 'Stalled')['message']}")
    assert "other work" in condition(stalled, "Stalled")["message"]
    assert not client.BatchV1Api(kube_api).list_namespaced_job(namespace).items


def test_a_claim_restored_as_velero_restores_it_is_adopted_and_training_resumes_from_it(
    kube_api, namespace, operator, cluster, mlflow
):
    """whenDeleted unset (Delete): the claim goes with the TrainingRun, its volume kept (as a backup's
    snapshot keeps it). Restored as Velero restores (resetMetadataAndStatus: name, namespace, labels and
    annotations; no ownerReferences, no status; the claim bound to its volume), it is adopted: owned by
    the restored TrainingRun, which resumes from the checkpoint it holds."""
    operator(kubeconfig=audited_kubeconfig(cluster, USER))
    core, model = client.CoreV1Api(kube_api), f"digits-{namespace}"
    body = training_run("digits", steps=16, model=model, env={"SLIPWAY_STEP_SECONDS": "0.5"},
                        checkpoint={"size": "1Gi"})  # fmt: skip
    apply_object(kube_api, namespace, body)
    running = wait_status(kube_api, namespace, "TrainingRun", "digits", checkpointed(4), 180, "checkpoint 4")
    backup = claim_of(kube_api, namespace)
    assert backup is not None and backup.metadata.owner_references[0].uid == running["metadata"]["uid"]
    volume = backup.spec.volume_name
    core.patch_persistent_volume(volume, {"spec": {"persistentVolumeReclaimPolicy": "Retain"}})  # the backup
    try:
        restore(kube_api, namespace, cluster, mlflow, running, backup)
    finally:  # the volume goes with the test's namespace again
        core.patch_persistent_volume(volume, {"spec": {"persistentVolumeReclaimPolicy": "Delete"}})


def restore(
    kube_api: client.ApiClient, namespace: str, cluster: Any, mlflow: MlflowClient, running: dict[str, Any],
    backup: client.V1PersistentVolumeClaim,
) -> None:  # fmt: skip
    """Delete the TrainingRun (its claim goes, its volume is kept), then restore both as Velero does."""
    core, volume, run_id = client.CoreV1Api(kube_api), backup.spec.volume_name, running["status"]["mlflow"]["runId"]
    model = running["spec"]["model"]["name"]
    delete_run(kube_api, namespace)
    wait_for(lambda: claim_of(kube_api, namespace) is None, 60, "the claim deleted with its TrainingRun")
    core.patch_persistent_volume(volume, {"spec": {"claimRef": None}})  # restored: Available for its claim
    velero = {"velero.io/backup-name": "nightly", "velero.io/restore-name": "nightly-1"}
    labels = {**backup.metadata.labels, **velero}
    spec = {"accessModes": backup.spec.access_modes, "storageClassName": backup.spec.storage_class_name,
            "resources": {"requests": backup.spec.resources.requests}, "volumeName": volume}  # fmt: skip
    kept = {k: v for k, v in (backup.metadata.annotations or {}).items() if k.startswith("slipway.dev/")}
    assert kept.get("slipway.dev/work")  # the work key the claim was made for, as Velero restores it
    restored_claim = {"metadata": {"name": CLAIM, "labels": labels, "annotations": kept}, "spec": spec}
    core.create_namespaced_persistent_volume_claim(namespace, restored_claim)
    before, since = training_runs(mlflow, model, f"{namespace}/digits"), datetime.now(UTC)
    restored = {"apiVersion": running["apiVersion"], "kind": "TrainingRun", "spec": running["spec"],
                "metadata": {"name": "digits", "labels": velero}}  # fmt: skip
    again = apply_object(kube_api, namespace, restored)
    resumed_in_one_run(kube_api, namespace, mlflow, run_id, "Velero restore", since, cluster, before)
    adopted = claim_of(kube_api, namespace)
    assert adopted is not None and adopted.spec.volume_name == volume
    [owner] = adopted.metadata.owner_references
    assert owner.uid == again["metadata"]["uid"] and owner.controller  # whenDeleted unset: Delete, now owned


def test_a_claim_owned_by_another_object_or_labelled_for_another_trainingrun_is_never_adopted_nor_mounted(
    kube_api, namespace, operator
):
    """Two claims planted under TrainingRuns' claim names: ``digits-checkpoints``, labelled for
    digits but owned by a live ConfigMap; ``other-checkpoints``, with no owner but labelled for
    digits. Both TrainingRuns (Retain, which adopts unowned claims of their own) are Stalled
    OwnedByOther, make no Job, and no pod mounts either claim; neither claim is changed."""
    operator()
    core = client.CoreV1Api(kube_api)
    holder = core.create_namespaced_config_map(namespace, {"metadata": {"name": "holder"}})
    owned_by = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "holder", "uid": holder.metadata.uid,
                 "controller": True}]  # fmt: skip
    planted = {}
    for name, refs in ((CLAIM, owned_by), (build.pvc_name("other"), None)):
        meta = {"name": name, "labels": build.labels("digits"), **({"ownerReferences": refs} if refs else {})}
        spec = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
        planted[name] = core.create_namespaced_persistent_volume_claim(namespace, {"metadata": meta, "spec": spec})
    for run in ("digits", "other"):
        apply_object(kube_api, namespace, training_run(run, steps=2, checkpoint={"size": "1Gi",
                                                                                 "whenDeleted": "Retain"}))  # fmt: skip
    for run in ("digits", "other"):
        stalled = wait_status(kube_api, namespace, "TrainingRun", run, refused, 60, "Stalled OwnedByOther")
        report(f"TrainingRun {run}: {condition(stalled, 'Stalled')['message']}")
        assert build.pvc_name(run) in condition(stalled, "Stalled")["message"]
    assert not client.BatchV1Api(kube_api).list_namespaced_job(namespace).items
    mounted = [v.persistent_volume_claim.claim_name for p in core.list_namespaced_pod(namespace).items
               for v in p.spec.volumes or [] if v.persistent_volume_claim]  # fmt: skip
    assert mounted == []
    for name, before in planted.items():
        now = core.read_namespaced_persistent_volume_claim(name, namespace)
        assert now.metadata.owner_references == before.metadata.owner_references
        assert now.metadata.labels == before.metadata.labels


def test_a_claim_restored_with_a_stale_owner_reference_is_deleted_by_kubernetes_and_the_run_waits_for_it(
    kube_api, namespace, operator
):
    """A restore that keeps ownerReferences (not Velero's) brings the claim back owned by a
    TrainingRun uid that is gone: Kubernetes' garbage collector marks it deleted at once (here a
    restore tool's finalizer holds it). The TrainingRun is not Stalled OwnedByOther: it waits,
    Reconciling CheckpointClaimDeleting, with no Job, and makes a claim of its own once it is gone."""
    operator()
    core = client.CoreV1Api(kube_api)
    gone = "00000000-0000-4000-8000-000000000000"
    stale = [{"apiVersion": "slipway.dev/v1alpha1", "kind": "TrainingRun", "name": "digits", "uid": gone,
              "controller": True, "blockOwnerDeletion": True}]  # fmt: skip
    meta = {"name": CLAIM, "labels": build.labels("digits"), "ownerReferences": stale,
            "finalizers": ["restore.example.com/hold"]}  # fmt: skip
    spec = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    made = time.monotonic()
    planted = core.create_namespaced_persistent_volume_claim(namespace, {"metadata": meta, "spec": spec})
    wait_for(lambda: core.read_namespaced_persistent_volume_claim(CLAIM, namespace).metadata.deletion_timestamp,
             30, "the garbage collector deleting the claim", interval=0.01)  # fmt: skip
    deleted = time.monotonic() - made
    apply_object(kube_api, namespace, training_run("digits", steps=2, checkpoint={"size": "1Gi"}))
    seen: set[str] = set()

    def reasons(o: dict[str, Any]) -> str:
        """The reason of the TrainingRun's Reconciling condition while true ("" else), noting Stalled's too."""
        found = [c.get("reason") or "" if c.get("status") == "True" else "" for c in
                 (condition(o, "Reconciling"), condition(o, "Stalled"))]  # fmt: skip
        seen.update(r for r in found if r)
        return found[0]

    wait_status(kube_api, namespace, "TrainingRun", "digits", lambda o: reasons(o) == "CheckpointClaimDeleting", 60,
                "waiting for the claim being deleted")  # fmt: skip
    assert not client.BatchV1Api(kube_api).list_namespaced_job(namespace).items
    core.patch_namespaced_persistent_volume_claim(CLAIM, namespace, {"metadata": {"finalizers": None}})
    done = wait_status(kube_api, namespace, "TrainingRun", "digits", lambda o: reasons(o) == "" and settled(o), 180,
                       "trained in a claim of its own")  # fmt: skip
    claim = claim_of(kube_api, namespace)
    report(f"claim restored with a stale ownerReference: marked deleted by the garbage collector within "
           f"{deleted:.3f}s of its creation; TrainingRun reasons seen {sorted(seen)}")  # fmt: skip
    assert done["status"]["phase"] == "Succeeded" and "OwnedByOther" not in seen
    assert claim is not None and claim.metadata.uid != planted.metadata.uid
    assert [r.uid for r in claim.metadata.owner_references] == [done["metadata"]["uid"]]


def test_whendeleted_changed_before_training_starts_hands_the_claim_over_or_releases_it(kube_api, namespace, operator):
    """On a TrainingRun applied suspended (its spec may change until training starts, status.startTime):
    Retain to Delete gives the claim the TrainingRun as its controller owner; back to Retain removes
    it, and deleting the TrainingRun leaves the claim. Once training has started the spec is fixed."""
    operator()
    body = training_run("digits", steps=4, checkpoint={"size": "1Gi", "whenDeleted": "Retain"}, suspend=True)
    uid = apply_object(kube_api, namespace, body)["metadata"]["uid"]

    def owners() -> list[str] | None:
        claim = claim_of(kube_api, namespace)
        return None if claim is None else [r.uid for r in claim.metadata.owner_references or [] if r.controller]

    wait_for(lambda: owners() == [], 60, "the claim, with no owner")
    for when, expected in (("Delete", [uid]), ("Retain", [])):
        patch = {"spec": {"checkpoint": {"size": "1Gi", "whenDeleted": when}}}
        custom(kube_api).patch_namespaced_custom_object("slipway.dev", "v1alpha1", namespace, "trainingruns",
                                                        "digits", patch)  # fmt: skip
        wait_for(lambda expected=expected: owners() == expected, 30, f"whenDeleted {when}: owners {expected}")
    assert not (get_object(kube_api, namespace, "TrainingRun", "digits").get("status") or {}).get("startTime")
    delete_run(kube_api, namespace)
    assert owners() == []
