"""TrainingRun passes: level-based, woken by changes of the run, its Job, pods and ModelArtifact,
and by a progress timer while it trains; everything is recomputed from the cache and MLflow."""

from __future__ import annotations

from typing import Any

from slipway import API_VERSION, kube, sizing
from slipway.builders import trainingrun as build
from slipway.handlers.common import MLFLOW_NOT_CONFIGURED, Context, run_pass, write_status
from slipway.mlflow import MlflowClient, tag_filter
from slipway.models import TrainingRunSpec
from slipway.models.trainingrun import TrainingRunStatus
from slipway.status import jobs
from slipway.status.conditions import stalled
from slipway.status.trainingrun import TrainingState, progress_from_run, training_state

UID_TAG = "slipway.dev/uid"
USER_SUSPENDED = "slipway.dev/suspended-by-spec"


def reconcile(ctx: Context, spec: TrainingRunSpec) -> float | None:
    """Bring the run's children and status in line with its spec and what actually happened."""
    if _finished(ctx.body):
        return None  # nothing changes any more: no I/O at rest
    job = ctx.child("jobs", build.job_name(ctx.name))
    sizing_status, refusal = _sizing(ctx.kube, spec, ctx.name, ctx.namespace, job is None, ctx.status.get("sizing"))
    if refusal is not None and job is None:
        _write(ctx, training_state(spec, None, [], sizing_refusal=refusal), sizing=sizing_status)
        return None
    if ctx.mlflow is None:
        write_status(ctx, stalled("MlflowNotConfigured", MLFLOW_NOT_CONFIGURED))
        return None
    run = _mlflow_run(ctx.mlflow, spec, ctx.body)
    for child, index in ((build.checkpoint_pvc(ctx.name, ctx.namespace, spec), "pvcs"),
                         (build.headless_service(ctx.name, ctx.namespace, spec), "services")):  # fmt: skip
        if child is not None:
            ctx.ensure(index, child)
    if job is None and ctx.status.get("completionTime"):
        return None  # the Job of a finished run was deleted (TTL, clean-up): never train again into a closed run
    if job is None:
        link = build.MlflowLink(ctx.config.mlflow_url or ctx.mlflow.tracking_uri, run.run_id, run.experiment_id)
        job = ctx.ensure("jobs", build.job(ctx.name, ctx.namespace, spec, link))
    else:
        job = _apply_suspend(ctx.kube, spec, job)
    pods = ctx.cache.select("pods", "run", ctx.namespace, ctx.name)
    artifact_name = _artifact(ctx, spec, job)
    state = training_state(spec, job, pods, artifact_pending=spec.artifact is not None and artifact_name is None)
    run = _finish_mlflow_run(ctx.mlflow, run, state)
    progress, checkpoint = progress_from_run(run)
    url = ctx.mlflow.run_url(run.experiment_id, run.run_id, ui_base=ctx.config.mlflow_public_url)
    mlflow_status = {"runId": run.run_id, "experimentId": run.experiment_id, "runUrl": url}
    artifact_ref = {"name": artifact_name} if artifact_name else None
    _write(ctx, state, sizing=sizing_status, mlflow=mlflow_status, progress=progress, last_checkpoint=checkpoint,
           artifact_ref=artifact_ref)  # fmt: skip
    # Progress lives in MLflow, which sends no events: while the run trains, time is the input.
    return ctx.config.progress_poll_seconds if state.phase == "Running" else None


PASS = (TrainingRunStatus, lambda ctx: run_pass(ctx, TrainingRunSpec, reconcile, needs_mlflow=False))


def _finished(body: dict[str, Any]) -> bool:
    """Succeeded (with its artifact) or Failed, at the current generation."""
    status = body.get("status") or {}
    if status.get("observedGeneration") != body["metadata"].get("generation"):
        return False
    artifact_done = not (body.get("spec") or {}).get("artifact") or status.get("artifactRef")
    return status.get("phase") == "Failed" or (status.get("phase") == "Succeeded" and bool(artifact_done))


def _write(ctx: Context, state: TrainingState, **fields: Any) -> None:
    write_status(
        ctx,
        state.conditions,
        phase=state.phase,
        restarts=state.restarts,
        start_time=state.start_time,
        completion_time=state.completion_time,
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


def _mlflow_run(client: MlflowClient, spec: TrainingRunSpec, body: dict[str, Any]) -> Any:
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


def _artifact(ctx: Context, spec: TrainingRunSpec, job: dict[str, Any]) -> str | None:
    """Create the run's ModelArtifact once the Job completed; its name is the run's name."""
    if spec.artifact is None or not jobs.is_complete(job):
        return None
    artifact = {
        "apiVersion": API_VERSION,
        "kind": "ModelArtifact",
        "metadata": {"name": ctx.name, "namespace": ctx.namespace, "labels": build.labels(ctx.name)},
        "spec": {
            "model": spec.model.to_dict(),
            "source": {"trainingRunRef": {"name": ctx.name}},
            **spec.artifact.to_dict(),
        },
    }
    ctx.ensure("modelartifacts", artifact)
    return ctx.name
