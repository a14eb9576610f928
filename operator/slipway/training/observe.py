"""What a TrainingRun pass reads, into plain records (``training.records``): its Job or JobSet, a
JobSet's Jobs and the training pods from the cache, the nodes' GPU memory for the sizing check,
MLflow (a predecessor's finished run, the run's own), the Job's FailedCreate Events, Kueue's
Workload and queue, and the prices. Nothing here writes but the reads' own caches (the MLflow run
read at most once per progress poll, ``training.runread``)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

from slipway import kinds, kube
from slipway.reconcile import Context
from slipway.redact import without_credentials
from slipway.status import jobs
from slipway.training import adopt as trainingadopt
from slipway.training import build, gate, mlflowrun, runread, sizing
from slipway.training import cost as trainingcost
from slipway.training import queue as trainingqueue
from slipway.training.model import TrainingRunSpec
from slipway.training.records import Children, Finished, Seen, Start, child_of

JOBSET = (kinds.JOBSET.group, kinds.JOBSET.version, kinds.JOBSET.plural)


def start(ctx: Context, spec: TrainingRunSpec) -> Start:
    """What runs the pods, the Job (or JobSet) as cached, and the sizing check (nodes are read only
    before the Job exists)."""
    runtime = runtime_of(ctx, spec)
    child = ctx.child(*child_of(ctx.name, runtime))
    status, refusal = sizing_of(ctx, spec, child is None)
    return Start(runtime, child, status, refusal, mlflow=ctx.mlflow is not None)


def look_up(ctx: Context, spec: TrainingRunSpec, seen: Start) -> Start:
    """``seen`` with what MLflow says of a predecessor's run that finished this training
    (trainingadopt.finished_run); else, for a JobSet still to be made, whether the cluster serves
    JobSets; and whether other objects wait for their first pass."""
    assert ctx.mlflow is not None
    run = trainingadopt.finished_run(ctx, spec, ctx.mlflow, seen.child)
    if run is not None:
        url = ctx.mlflow.run_url(run.experiment_id, run.run_id, ui_base=ctx.config.mlflow_public_url)
        finished = Finished(mlflowrun.seen(run, trainingcost.COST_METRICS), trainingadopt.completed_job(run), url)
        gated = trainingadopt.gated_own_job(ctx, seen.child)
        return dataclasses.replace(seen, looked_up=True, finished=finished, gated_own_child=gated)
    served = kube.serves(ctx.kube, *JOBSET) if seen.child is None and seen.runtime == "JobSet" else None
    backlog = seen.child is None and bool(ctx.backlog())
    return dataclasses.replace(seen, looked_up=True, jobset_served=served, backlog=backlog)


def runtime_of(ctx: Context, spec: TrainingRunSpec) -> str:
    """What runs the pods: as recorded in status, else what exists (a run made before
    spec.runtime), else spec.runtime, else JobSet for several nodes where the cluster serves it."""
    recorded = ctx.status.get("runtime")
    if recorded in ("Job", "JobSet"):
        return str(recorded)
    if ctx.child("jobs", build.job_name(ctx.name)) is not None:
        return "Job"
    if ctx.child("jobsets", build.jobset_name(ctx.name)) is not None:
        return "JobSet"  # made by a pass that wrote no status
    if spec.runtime is not None:
        return spec.runtime
    return "JobSet" if spec.nodes > 1 and kube.serves(ctx.kube, *JOBSET) else "Job"


def sizing_of(ctx: Context, spec: TrainingRunSpec, before_start: bool) -> tuple[dict[str, Any] | None, str | None]:
    """(status.sizing, refusal message). Nodes are read only before the Job exists."""
    if spec.sizing is None:
        return None, None
    stored = ctx.status.get("sizing") or {}
    memory: float | None = None
    if spec.sizing.gpu_memory_gib:
        memory = spec.sizing.gpu_memory_gib * sizing.GIB
    elif before_start:
        memory = sizing.gpu_memory_of_nodes(kube.list_nodes(ctx.kube), spec)
    elif stored.get("availableGib"):
        memory = stored["availableGib"] * sizing.GIB
    return sizing.sizing_status(spec, f"{ctx.namespace}/{ctx.name}", memory)


def pod_tracking_uri(ctx: Context) -> str:
    """The MLflow address the training pods log to."""
    assert ctx.mlflow is not None
    return ctx.config.pod_mlflow_url or without_credentials(ctx.mlflow.tracking_uri)


def children(ctx: Context, spec: TrainingRunSpec, runtime: str, child: dict[str, Any], made_now: bool) -> Children:
    """The run's Job (or JobSet), a JobSet's Jobs and the training pods from the cache, and its
    MLflow run (runread.mlflow_run) unless the Job was made by this pass and no run is recorded."""
    members = [
        m
        for m in ctx.cache.owned_by("jobs", child["metadata"]["uid"])
        if runtime == "JobSet" and m["metadata"].get("namespace") == ctx.namespace
    ]
    pods = ctx.cache.select("pods", "run", ctx.namespace, ctx.name)
    found = Children(runtime, child, members, pods)
    if made_now and not (ctx.status.get("mlflow") or {}).get("runId"):
        return found
    assert ctx.mlflow is not None
    run, cached = runread.mlflow_run(ctx, spec, ctx.mlflow)
    link = gate.MlflowLink(pod_tracking_uri(ctx), run.run_id, run.experiment_id)
    return dataclasses.replace(found, run=run, cached=cached, link=link)


def status_inputs(
    ctx: Context, spec: TrainingRunSpec, found: Children, artifact: dict[str, Any] | None, sizing: dict[str, Any] | None
) -> Seen:
    """What the status is decided from, read after the Job was released and patched: the pods the
    API server refuses, the Kueue queue, the cost, and a finished run's MLflow run as it is now (the
    last word, not a poll's copy)."""
    job, pods, now = found.job, found.pods, datetime.now(UTC)
    refused = creation_failure(ctx, job, found.members, pods, now)
    queue_name, queue, placed = trainingqueue.queue(ctx, spec, job)
    spent = trainingcost.status_cost(ctx, pods, now)
    run, url = found.run, ""
    if run is not None:
        assert ctx.mlflow is not None
        if found.cached and (jobs.is_complete(job) or jobs.failure(job) is not None):
            run = runread.read_run(ctx, ctx.mlflow, run.run_id, run)
        url = ctx.mlflow.run_url(run.experiment_id, run.run_id, ui_base=ctx.config.mlflow_public_url)
    return Seen(job, pods, artifact, run, url, now, refused, queue_name, queue, placed, sizing, spent, found.runtime)


def creation_failure(
    ctx: Context, job: dict[str, Any], members: list[dict[str, Any]], pods: list[dict[str, Any]], now: datetime
) -> str | None:
    """The API server's refusal of the pods of a Job that should have had pods by now (its FailedCreate Event)."""
    podless = not pods and jobs.should_have_pods(job) and jobs.old_enough_for_pods(job, now)
    if not podless:
        return None
    return next((m for j in (members or [job]) if (m := kube.creation_failure(ctx.kube, j))), None)
