"""A TrainingRun deleted and applied again from the same YAML (Argo CD after a prune, or a Velero
restore: a new uid, no status), on the local cluster with real MLflow: it shows the MLflow run its
predecessor finished and trains nothing (no Job, no run); one whose predecessor was cut short goes on
in that run; a spec that differs is new work. What the operator creates is counted from the API
server's audit log, the runs from MLflow."""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client

from localkube.audit import audited_kubeconfig, requests_by
from localkube.faultproxy import FaultProxy
from localkube.wait import wait_for
from slipway.mlflow import MlflowClient, tag_filter
from slipway.training.adopt import work_of
from slipway.training.model import TrainingRunSpec
from slipway_testing import apply_object, custom, get_object, report, training_run, wait_status

pytestmark = pytest.mark.cluster

USER = "slipway-reapply-trainingrun"
MADE = ("jobs", "jobsets", "modelartifacts")


def settled(obj: dict[str, Any]) -> bool:
    """Succeeded with its ModelArtifact decided, or Failed."""
    status = obj.get("status") or {}
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
    return status.get("phase") == "Failed" or (status.get("phase") == "Succeeded" and ready.get("status") == "True")


def training_runs(mlflow: MlflowClient, experiment: str, owner: str) -> list[str]:
    """The ids of the training runs of the TrainingRun ``owner`` (namespace/name) in ``experiment``."""
    found = mlflow.search_runs([mlflow.get_or_create_experiment(experiment)], filter=tag_filter(
        "slipway.dev/trainingrun", owner))  # fmt: skip
    return sorted(r.run_id for r in found)


def created(cluster: Any, namespace: str, since: datetime) -> dict[str, int]:
    """What the operator created in ``namespace`` since ``since``, by resource (the audit log)."""
    writes = requests_by(cluster, USER, since)
    made = Counter(r.resource for r in writes if r.verb == "create" and r.namespace == namespace
                   and r.resource in MADE and r.subresource is None and 200 <= r.code < 300)  # fmt: skip
    return {resource: made.get(resource, 0) for resource in MADE}


def delete_and_wait(kube_api: client.ApiClient, namespace: str, name: str, children: bool = True) -> None:
    """Delete the TrainingRun; wait for it to be gone, and (``children``) what it owned (Job, PVC,
    ModelArtifact): without, it is applied again while the garbage collector still deletes them."""
    custom(kube_api).delete_namespaced_custom_object("slipway.dev", "v1alpha1", namespace, "trainingruns", name)
    batch, core = client.BatchV1Api(kube_api), client.CoreV1Api(kube_api)

    def gone() -> bool:
        try:
            get_object(kube_api, namespace, "TrainingRun", name)
            return False
        except client.ApiException as exc:
            if exc.status != 404:
                raise
        if not children:
            return True
        left = [
            *batch.list_namespaced_job(namespace).items,
            *core.list_namespaced_persistent_volume_claim(namespace).items,
        ]
        return not left and not custom(kube_api).list_namespaced_custom_object(
            "slipway.dev", "v1alpha1", namespace, "modelartifacts")["items"]  # fmt: skip

    wait_for(gone, 120, f"TrainingRun {name} and its Job, PVC and ModelArtifact deleted")


def as_velero_restores(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as a Velero restore creates it: metadata from the backup without uid, resourceVersion,
    creation time and managed fields, its status stripped, Velero's labels added."""
    meta = {k: v for k, v in obj["metadata"].items() if k in ("name", "labels", "annotations")}
    meta["labels"] = {**(meta.get("labels") or {}), "velero.io/backup-name": "nightly",
                      "velero.io/restore-name": "nightly-1"}  # fmt: skip
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "metadata": meta, "spec": obj["spec"]}


def adopted_events(kube_api: client.ApiClient, namespace: str, uid: str) -> list[str]:
    events = client.CoreV1Api(kube_api).list_namespaced_event(namespace).items
    return [e.message for e in events if e.reason == "AdoptedRun" and e.involved_object.uid == uid]


def test_a_trainingrun_applied_again_or_restored_shows_its_finished_run_and_trains_nothing(
    kube_api, namespace, operator, cluster, mlflow
):
    operator(kubeconfig=audited_kubeconfig(cluster, USER))
    model, owner = f"digits-{namespace}", f"{namespace}/digits"
    artifact = {"quantization": {"method": "none"}, "aliases": ["candidate"],
                "validation": {"gates": [{"metric": "accuracy", "min": 0.5}]}}  # fmt: skip
    body = training_run("digits", steps=4, model=model, checkpoint={"size": "1Gi"}, artifact=artifact)
    since = datetime.now(UTC)
    apply_object(kube_api, namespace, body)
    first = wait_status(kube_api, namespace, "TrainingRun", "digits", settled, 300, "trained and validated")
    assert first["status"]["phase"] == "Succeeded", first["status"]
    run_id, version = first["status"]["mlflow"]["runId"], get_object(kube_api, namespace, "ModelArtifact", "digits")[
        "status"]["modelVersion"]  # fmt: skip
    report(f"first apply: created {created(cluster, namespace, since)}, training runs "
           f"{training_runs(mlflow, model, owner)}, version {version}")  # fmt: skip

    for how in ("re-apply", "Velero restore", "re-apply at once"):
        before = training_runs(mlflow, model, owner)
        current = get_object(kube_api, namespace, "TrainingRun", "digits")
        delete_and_wait(kube_api, namespace, "digits", children=how != "re-apply at once")
        since = datetime.now(UTC)
        again = apply_object(kube_api, namespace, as_velero_restores(current) if how == "Velero restore" else body)
        assert again["metadata"]["uid"] != current["metadata"]["uid"] and not again.get("status")
        shown = wait_status(kube_api, namespace, "TrainingRun", "digits", settled, 180, f"settled after {how}")
        status = shown["status"]
        after, made = training_runs(mlflow, model, owner), created(cluster, namespace, since)
        served = get_object(kube_api, namespace, "ModelArtifact", "digits")["status"].get("modelVersion")
        report(f"TrainingRun {how}: created {made}, training runs {len(before)} -> {len(after)}, run shown "
               f"{status['mlflow']['runId']} (first {run_id}), phase {status['phase']}, version {served}")  # fmt: skip
        assert status["phase"] == "Succeeded" and status["mlflow"]["runId"] == run_id
        assert status["progress"]["step"] == 4 and status["lastCheckpoint"]["step"] == 4
        assert after == before and made == {"jobs": 0, "jobsets": 0, "modelartifacts": 1}, made
        assert served == version  # the ModelArtifact adopts its predecessor's version in turn
        assert not client.BatchV1Api(kube_api).list_namespaced_job(namespace).items
        uid = again["metadata"]["uid"]
        wait_for(lambda uid=uid: any(run_id in m for m in adopted_events(kube_api, namespace, uid)),
                 30, "an AdoptedRun Event naming the run")  # fmt: skip

    # A hyperparameter that differs is new work: a run of its own, trained by a Job of its own.
    delete_and_wait(kube_api, namespace, "digits")
    before, since = training_runs(mlflow, model, owner), datetime.now(UTC)
    changed = {**body, "spec": {**body["spec"], "args": [*body["spec"]["args"], "--hidden-units", "24"]}}
    apply_object(kube_api, namespace, changed)
    trained = wait_status(kube_api, namespace, "TrainingRun", "digits", settled, 300, "the new spec trained")
    after, made = training_runs(mlflow, model, owner), created(cluster, namespace, since)
    report(f"TrainingRun changed spec: created {made}, training runs {len(before)} -> {len(after)}, "
           f"run shown {trained['status']['mlflow']['runId']}")  # fmt: skip
    assert trained["status"]["phase"] == "Succeeded" and trained["status"]["mlflow"]["runId"] != run_id
    assert len(after) == len(before) + 1 and made["jobs"] == 2  # its training Job, and its new version's validation


def test_a_trainingrun_cut_short_and_applied_again_goes_on_in_its_run(kube_api, namespace, operator, cluster, mlflow):
    operator(kubeconfig=audited_kubeconfig(cluster, USER))
    model, owner = f"digits-{namespace}", f"{namespace}/digits"
    body = training_run(
        "digits", steps=16, model=model, env={"SLIPWAY_STEP_SECONDS": "0.5"}, checkpoint={"size": "1Gi"}
    )
    apply_object(kube_api, namespace, body)
    running = wait_status(kube_api, namespace, "TrainingRun", "digits",
                          lambda o: ((o.get("status") or {}).get("lastCheckpoint") or {}).get("step", 0) >= 4,
                          180, "checkpoint 4")  # fmt: skip
    run_id = running["status"]["mlflow"]["runId"]
    delete_and_wait(kube_api, namespace, "digits")  # mid-training: its pod stops, the run stays open
    cut = mlflow.get_run(run_id)
    before, since = training_runs(mlflow, model, owner), datetime.now(UTC)
    again = apply_object(kube_api, namespace, body)
    done = wait_status(kube_api, namespace, "TrainingRun", "digits", settled, 300, "finished after re-apply")
    after, made, run = training_runs(mlflow, model, owner), created(cluster, namespace, since), mlflow.get_run(run_id)
    steps = [int(m.value) for m in mlflow.get_metric_history(run_id, "step")]
    report(f"TrainingRun cut short at checkpoint {cut.tags.get('slipway.dev/checkpoint-step')} ({cut.status}), "
           f"re-applied: created {made}, training runs {len(before)} -> {len(after)}, run shown "
           f"{done['status']['mlflow']['runId']} (first {run_id}), resumed from step "
           f"{run.tags.get('slipway.dev/resumed-from-step', 'none: its checkpoint volume went with the TrainingRun')}, "
           f"steps logged {len(steps)}, attempts {run.tags.get('slipway.dev/attempts')}")  # fmt: skip
    assert done["status"]["phase"] == "Succeeded" and done["status"]["mlflow"]["runId"] == run_id
    assert after == before and made["jobs"] == 1 and run.status == "FINISHED"
    assert run.tags.get("slipway.dev/attempts") == "2"  # the second attempt reported to the same run
    assert any(run_id in m for m in adopted_events(kube_api, namespace, again["metadata"]["uid"]))


def test_a_run_forged_outside_the_trainingruns_experiment_is_never_adopted(
    kube_api, namespace, operator, cluster, mlflow
):
    """Someone who can write to another experiment (another team's) plants a FINISHED run there with
    the TrainingRun's work key and name, and one in its own experiment that names another TrainingRun:
    the TrainingRun adopts neither, and trains in a run of its own."""
    operator(kubeconfig=audited_kubeconfig(cluster, USER))
    model, owner = f"digits-{namespace}", f"{namespace}/digits"
    body = training_run("digits", steps=2, model=model)
    work = work_of(namespace, "digits", TrainingRunSpec.model_validate(body["spec"]))
    forged = []
    for experiment, named in ((f"other-team-{namespace}", owner), (model, f"{namespace}/other")):
        tags = {"slipway.dev/work": work, "slipway.dev/trainingrun": named, "slipway.dev/checkpoint-step": "2"}
        run = mlflow.create_run(mlflow.get_or_create_experiment(experiment), "forged", tags)
        mlflow.update_run(run.run_id, status="FINISHED")
        forged.append(run.run_id)
    since = datetime.now(UTC)
    apply_object(kube_api, namespace, body)
    done = wait_status(kube_api, namespace, "TrainingRun", "digits", settled, 180, "trained")
    shown, made = done["status"]["mlflow"]["runId"], created(cluster, namespace, since)
    report(f"forged runs {forged}: created {made}, run shown {shown}")
    assert done["status"]["phase"] == "Succeeded" and shown not in forged and made["jobs"] == 1
    assert mlflow.get_run(shown).tags["slipway.dev/work"] == work  # its own run carries its key


def test_applied_again_while_mlflow_is_away_its_job_comes_first_and_goes_once_the_finished_run_is_found(
    kube_api, namespace, operator, cluster, mlflow
):
    """A TrainingRun's Job is made before its MLflow run, MLflow or not (a sweep's Jobs exist within
    seconds). Applied again while MLflow does not answer, the TrainingRun makes its Job, suspended and
    gated; once MLflow answers, the run its predecessor finished is found before the Job's pods get a
    run: the Job, which never ran a pod, is deleted and the run shown. No new run."""
    host, port = cluster.mlflow_url.removeprefix("http://").rsplit(":", 1)
    proxy = FaultProxy(host, int(port)).start()
    try:
        operator(mlflow_url=f"http://127.0.0.1:{proxy.port}", kubeconfig=audited_kubeconfig(cluster, USER))
        model, owner = f"digits-{namespace}", f"{namespace}/digits"
        body = training_run("digits", steps=2, model=model)
        apply_object(kube_api, namespace, body)
        run_id = wait_status(kube_api, namespace, "TrainingRun", "digits", settled, 180, "trained")["status"]["mlflow"][
            "runId"]  # fmt: skip
        delete_and_wait(kube_api, namespace, "digits")
        before, since = training_runs(mlflow, model, owner), datetime.now(UTC)
        proxy.blackhole()
        applied = time.monotonic()
        apply_object(kube_api, namespace, body)
        batch = client.BatchV1Api(kube_api)
        [job] = wait_for(lambda: batch.list_namespaced_job(namespace).items, 30, "the Job, MLflow away", interval=0.2)
        job_after = time.monotonic() - applied
        assert job.spec.suspend and not client.CoreV1Api(kube_api).list_namespaced_pod(namespace).items
        proxy.pass_through()
        shown = wait_status(kube_api, namespace, "TrainingRun", "digits", settled, 120, "settled once MLflow answers")
        wait_for(lambda: not batch.list_namespaced_job(namespace).items, 60, "the gated Job deleted")
    finally:
        proxy.close()
    after, made = training_runs(mlflow, model, owner), created(cluster, namespace, since)
    report(f"re-applied with MLflow away: Job {job_after:.1f}s after apply, created {made}, deleted once MLflow "
           f"answered; training runs {len(before)} -> {len(after)}, run shown {shown['status']['mlflow']['runId']} "
           f"(first {run_id})")  # fmt: skip
    assert shown["status"]["phase"] == "Succeeded" and shown["status"]["mlflow"]["runId"] == run_id
    assert after == before and made["jobs"] == 1
