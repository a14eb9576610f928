"""kopf handlers of TrainingRun: one level-based reconcile, run on create, update,
resume and a timer, that recomputes everything from the cluster and MLflow."""

from __future__ import annotations

from typing import Any

import kopf

from slipway import API_VERSION, kube, sizing
from slipway.builders import trainingrun as build
from slipway.config import OperatorConfig
from slipway.handlers.common import MLFLOW_NOT_CONFIGURED, level_based, reconcile_with, write_status
from slipway.mlflow import MlflowClient, tag_filter
from slipway.models import TrainingRunSpec
from slipway.status import jobs
from slipway.status.conditions import stalled
from slipway.status.trainingrun import TrainingState, progress_from_run, training_state

KIND = "TrainingRun"
PLURAL = "trainingruns"
UID_TAG = "slipway.dev/uid"
USER_SUSPENDED = "slipway.dev/suspended-by-spec"


@level_based(PLURAL)
def reconcile(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, **_: Any) -> None:
    """Bring the run's children and status in line with its spec and what actually happened."""
    if _finished(body):
        return  # nothing changes any more: no I/O at rest
    reconcile_with(
        KIND,
        TrainingRunSpec,
        body,
        patch,
        memo,
        lambda spec, _: _reconcile(body, spec, patch, memo),
        needs_mlflow=False,
    )


def _finished(body: kopf.Body) -> bool:
    """Succeeded (with its artifact) or Failed, at the current generation."""
    status = body.get("status") or {}
    if status.get("observedGeneration") != body["metadata"].get("generation"):
        return False
    artifact_done = not (body.get("spec") or {}).get("artifact") or status.get("artifactRef")
    return status.get("phase") == "Failed" or (status.get("phase") == "Succeeded" and bool(artifact_done))


def _reconcile(body: kopf.Body, spec: TrainingRunSpec, patch: kopf.Patch, memo: kopf.Memo) -> None:
    k: kube.Kube = memo.kube
    config: OperatorConfig = memo.config
    name, namespace = body["metadata"]["name"], body["metadata"]["namespace"]
    status = body.get("status") or {}
    job = kube.get(k, "Job", namespace, build.job_name(name))

    sizing_status, refusal = _sizing(k, spec, name, namespace, job is None, status.get("sizing"))
    if refusal is not None and job is None:
        _write(body, patch, training_state(spec, None, [], sizing_refusal=refusal), sizing=sizing_status)
        return

    client: MlflowClient | None = memo.get("mlflow")
    if client is None:
        write_status(KIND, body, patch, stalled("MlflowNotConfigured", MLFLOW_NOT_CONFIGURED))
        return
    run = _mlflow_run(client, config, spec, body)
    link = build.MlflowLink(config.mlflow_url or client.tracking_uri, run.run_id, run.experiment_id)
    mlflow_status = {
        "runId": run.run_id,
        "experimentId": run.experiment_id,
        "runUrl": client.run_url(run.experiment_id, run.run_id, ui_base=config.mlflow_public_url),
    }

    for child in (build.checkpoint_pvc(name, namespace, spec), build.headless_service(name, namespace, spec)):
        if child is not None and kube.get(k, child["kind"], namespace, child["metadata"]["name"]) is None:
            kopf.adopt(child, owner=body)
            kube.create(k, child["kind"], child)
    if job is None and status.get("completionTime"):
        # The Job of a finished run was deleted (TTL, clean-up): never train again into a closed run.
        return
    if job is None:
        desired = build.job(name, namespace, spec, link)
        kopf.adopt(desired, owner=body)
        job = kube.create(k, "Job", desired)
    else:
        job = _apply_suspend(k, spec, job)

    pods = kube.list_objects(k, "Pod", namespace, f"{build.RUN_LABEL}={name}")
    artifact_name = _artifact(k, spec, body, job)
    state = training_state(spec, job, pods, artifact_pending=spec.artifact is not None and artifact_name is None)
    run = _finish_mlflow_run(client, run, state)
    progress, checkpoint = progress_from_run(run)
    _write(
        body,
        patch,
        state,
        sizing=sizing_status,
        mlflow=mlflow_status,
        progress=progress,
        lastCheckpoint=checkpoint,
        artifactRef={"name": artifact_name} if artifact_name else None,
    )


def _write(body: kopf.Body, patch: kopf.Patch, state: TrainingState, **fields: Any) -> None:
    write_status(
        KIND,
        body,
        patch,
        state.conditions,
        phase=state.phase,
        restarts=state.restarts,
        startTime=state.start_time,
        completionTime=state.completion_time,
        **{k: v for k, v in fields.items() if v is not None},
    )


def _sizing(
    k: kube.Kube, spec: TrainingRunSpec, name: str, namespace: str, before_start: bool, stored: dict[str, Any] | None
) -> tuple[dict[str, Any] | None, str | None]:
    """(status.sizing, refusal message). Nodes are read only before the Job exists."""
    if spec.sizing is None:
        return None, None
    gpus = spec.resources.gpus * spec.nodes
    est = sizing.estimate(spec.sizing, gpus)
    memory: float | None
    if spec.sizing.gpu_memory_gib:
        memory = spec.sizing.gpu_memory_gib * sizing.GIB
    elif before_start:
        memory = _gpu_memory_of_nodes(k, spec)
    else:
        memory = stored["availableGib"] * sizing.GIB if stored and stored.get("availableGib") else None
    result: dict[str, Any] = {
        "weightsGib": sizing.gib(est.weights),
        "gradientsGib": sizing.gib(est.gradients),
        "optimizerGib": sizing.gib(est.optimizer),
        "activationsGib": sizing.gib(est.activations),
        "totalGib": sizing.gib(est.total),
    }
    refusal = None
    if memory is not None:
        result["availableGib"] = sizing.gib(memory)
        result["fits"] = est.total <= memory
        refusal = sizing.refusal(f"{namespace}/{name}", spec.sizing, spec.resources.gpus, spec.nodes, memory)
    return result, refusal


def _gpu_memory_of_nodes(k: kube.Kube, spec: TrainingRunSpec) -> float | None:
    """The largest GPU among nodes that match the run's nodeSelector and have enough GPUs."""
    best = None
    for node in kube.list_nodes(k):
        node_labels = node["metadata"].get("labels") or {}
        if any(node_labels.get(key) != value for key, value in (spec.node_selector or {}).items()):
            continue
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        if int(allocatable.get(spec.resources.gpu_resource_name, "0")) < spec.resources.gpus:
            continue
        memory = sizing.gpu_memory_from_labels(node_labels)
        if memory is not None and (best is None or memory > best):
            best = memory
    return best


def _mlflow_run(client: MlflowClient, config: OperatorConfig, spec: TrainingRunSpec, body: kopf.Body) -> Any:
    """The run of this TrainingRun: the one in status, else the one tagged with its uid, else a new one."""
    meta = body["metadata"]
    known = ((body.get("status") or {}).get("mlflow") or {}).get("runId")
    if known:
        return client.get_run(known)
    experiment_id = client.get_or_create_experiment(spec.mlflow.experiment or spec.model.name)
    found = client.search_runs([experiment_id], filter=tag_filter(UID_TAG, meta["uid"]), max_results=1)
    if found:
        return found[0]
    tags = {
        UID_TAG: meta["uid"],
        "slipway.dev/trainingrun": f"{meta['namespace']}/{meta['name']}",
        "slipway.dev/model": spec.model.name,
    }
    return client.create_run(experiment_id, run_name=f"{meta['namespace']}-{meta['name']}", tags=tags)


def _finish_mlflow_run(client: MlflowClient, run: Any, state: TrainingState) -> Any:
    """Close the run when the Job is done and the training code did not (the operator has the last word)."""
    if run.status == "RUNNING" and (state.succeeded or state.failed):
        client.update_run(run.run_id, status="FINISHED" if state.succeeded else "FAILED")
        return client.get_run(run.run_id)
    return run


def _apply_suspend(k: kube.Kube, spec: TrainingRunSpec, job: dict[str, Any]) -> dict[str, Any]:
    """spec.suspend -> Job suspend. A Job that Kueue holds (queueName) is only resumed if Slipway suspended it."""
    meta = job["metadata"]
    suspended = bool(job["spec"].get("suspend"))
    ours = (meta.get("annotations") or {}).get(USER_SUSPENDED) == "true"
    if jobs.is_complete(job) or jobs.failure(job):
        return job
    if spec.suspend and not suspended:
        body = {"metadata": {"annotations": {USER_SUSPENDED: "true"}}, "spec": {"suspend": True}}
        return kube.patch(k, "Job", meta["namespace"], meta["name"], body)
    if not spec.suspend and suspended and (ours or spec.queue_name is None):
        body = {"metadata": {"annotations": {USER_SUSPENDED: None}}, "spec": {"suspend": False}}
        return kube.patch(k, "Job", meta["namespace"], meta["name"], body)
    return job


def _artifact(k: kube.Kube, spec: TrainingRunSpec, body: kopf.Body, job: dict[str, Any]) -> str | None:
    """Create the run's ModelArtifact once the Job completed; its name is the run's name."""
    if spec.artifact is None:
        return None
    meta = body["metadata"]
    if not jobs.is_complete(job):
        return None
    if kube.get_custom(k, "modelartifacts", meta["namespace"], meta["name"]) is None:
        artifact = {
            "apiVersion": API_VERSION,
            "kind": "ModelArtifact",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"], "labels": build.labels(meta["name"])},
            "spec": {
                "model": spec.model.to_dict(),
                "source": {"trainingRunRef": {"name": meta["name"]}},
                **spec.artifact.to_dict(),
            },
        }
        kopf.adopt(artifact, owner=body)
        kube.create_custom(k, "modelartifacts", artifact)
    return str(meta["name"])
